"""The on-device exact k-NN search (``dmlkit.evaluation.knn_device``) against float64 brute force and the
CPU search, neighbour for neighbour; the retrieval metrics routed through it; its input errors.

The search is device-generic, so the CPU runs it here; the ``cuda`` tests repeat the comparison on a GPU
(``scripts/device_check.sh`` runs them on a lent machine) and skip elsewhere.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dmlkit.evaluation import retrieval
from dmlkit.evaluation.knn import knn_search
from dmlkit.evaluation.knn_device import device_knn_search


def brute_force(query: torch.Tensor, reference: torch.Tensor, k: int, exclude_self: bool):
    """float64 direct differences over all pairs, stable sort: ties to the smaller index."""
    q, r = query.float().double(), reference.float().double()
    d2 = ((q[:, None, :] - r[None, :, :]) ** 2).sum(-1)
    if exclude_self:
        own = torch.arange(len(q))
        d2[own, own] = float("inf")
    d2, idx = torch.sort(d2, dim=1, stable=True)
    return idx[:, :k], d2[:, :k]


def tied_points(n: int, d: int, seed: int) -> torch.Tensor:
    """Points on a coarse grid (many exact distance ties), with exact and near duplicates."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, (n, d), generator=g).float() * 0.5
    x[5] = x[6]
    x[7] = x[8] + 1e-6
    return x


@pytest.mark.parametrize("n,d,k,block", [(300, 4, 7, 4096), (257, 16, 40, 20000), (64, 3, 63, 512)])
def test_self_search_equals_brute_force_with_ties(n, d, k, block):
    x = tied_points(n, d, seed=n)
    found = device_knn_search(x, k, max_block_bytes=block, squared=True)
    idx, d2 = brute_force(x, x, k, exclude_self=True)
    assert torch.equal(found.indices, idx)
    assert torch.equal(found.distances, d2.float())


@pytest.mark.parametrize("exclude_self", [False, True])
def test_cross_search_equals_the_cpu_search(exclude_self):
    g = torch.Generator().manual_seed(3)
    query = torch.randn(400, 24, generator=g).round(decimals=1)
    reference = torch.cat([query, torch.randn(900, 24, generator=g).round(decimals=1)])
    cpu = knn_search(query, 15, reference, exclude_self=exclude_self)
    dev = device_knn_search(query, 15, reference, exclude_self=exclude_self, max_block_bytes=30000)
    assert torch.equal(dev.indices, cpu.indices)
    assert torch.equal(dev.distances, cpu.distances)


def test_near_duplicates_far_from_the_mean_are_repaired_in_float64():
    # Points 1e4 from the mean that differ by 1e-3: the float32 expansion cancels catastrophically, so the
    # certificate fails and the float64 search must give the true order.
    g = torch.Generator().manual_seed(0)
    far = 1e4 + torch.randn(40, 8, generator=g, dtype=torch.float64) * 1e-3
    near = torch.randn(400, 8, generator=g, dtype=torch.float64)
    x = torch.cat([near, far]).float()
    found = device_knn_search(x, 5)
    idx, _ = brute_force(x, x, 5, exclude_self=True)
    assert torch.equal(found.indices, idx)


def test_retrieval_metrics_through_the_device_path_equal_the_cpu_path(monkeypatch):
    g = torch.Generator().manual_seed(1)
    labels = torch.randint(0, 12, (500,), generator=g)
    emb = torch.randn(12, 16, generator=g)[labels] + 0.8 * torch.randn(500, 16, generator=g)
    cpu = retrieval.retrieval_metrics(emb, labels)
    monkeypatch.setattr(retrieval, "on_accelerator", lambda x: isinstance(x, torch.Tensor))
    called = []
    real = retrieval.device_neighbours
    monkeypatch.setattr(retrieval, "device_neighbours", lambda *a, **k: called.append(1) or real(*a, **k))
    dev = retrieval.retrieval_metrics(emb, labels)
    assert called, "the device path was not taken"
    assert dev == cpu


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: device_knn_search(np.zeros((4, 2)), 1), "must be a torch.Tensor"),
        (lambda: device_knn_search(torch.zeros(4), 1), "2-D"),
        (lambda: device_knn_search(torch.tensor([[0.0, float("nan")], [1.0, 1.0]]), 1), "NaN"),
        (lambda: device_knn_search(torch.zeros(4, 2), 4), "k must be between 1 and 3"),
        (lambda: device_knn_search(torch.zeros(4, 2), 1, torch.zeros(5, 3)), "different dimensions"),
        (lambda: device_knn_search(torch.zeros(4, 2), 1, torch.zeros(3, 2), exclude_self=True), "queries first"),
        (lambda: device_knn_search(torch.zeros(4, 2), 1, max_block_bytes=0), "max_block_bytes"),
    ],
)
def test_bad_input_is_a_value_error_that_names_it(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.cuda
def test_on_a_gpu_the_search_stays_there_and_equals_the_cpu_search():
    x = tied_points(5000, 32, seed=9)
    cpu = knn_search(x, 10)
    dev = device_knn_search(x.cuda(), 10)
    assert dev.indices.is_cuda
    assert torch.equal(dev.indices.cpu(), cpu.indices)
    assert torch.equal(dev.distances.cpu(), cpu.distances)


@pytest.mark.cuda
def test_on_a_gpu_the_retrieval_metrics_equal_the_cpu_ones():
    g = torch.Generator().manual_seed(2)
    labels = torch.randint(0, 50, (4000,), generator=g)
    emb = torch.randn(50, 64, generator=g)[labels] + torch.randn(4000, 64, generator=g)
    assert retrieval.retrieval_metrics(emb.cuda(), labels.cuda()) == retrieval.retrieval_metrics(emb, labels)
