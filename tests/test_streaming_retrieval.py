"""Retrieval metrics streamed from a .npy file in blocks equal the in-memory ones; approximate mode reports its recall."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dmlkit.evaluation import retrieval_metrics
from dmlkit.evaluation.streaming import retrieval_metrics_from_file


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(0)
    n, d = 700, 8
    labels = rng.integers(0, 120, size=n)
    centres = rng.standard_normal((120, d)).astype(np.float32)
    x = (centres[labels] + 0.8 * rng.standard_normal((n, d))).astype(np.float32)
    path = tmp_path_factory.mktemp("emb") / "emb.npy"
    np.save(path, x)
    return path, x, labels


def test_streamed_exact_metrics_equal_in_memory_metrics(data):
    path, x, labels = data
    expected = retrieval_metrics(x, labels)
    for budget in (0.15, 64):  # 0.15 MB: blocks of ~100 rows, so 7 x 7 block pairs; 64 MB: one block
        got = retrieval_metrics_from_file(path, labels, budget_mb=budget)
        assert got == pytest.approx(expected, abs=1e-12), budget


def test_query_sample_is_the_metric_of_those_queries(data):
    path, x, labels = data
    got = retrieval_metrics_from_file(path, labels, query_sample=50, seed=3, budget_mb=0.15)
    queries = np.sort(np.random.default_rng(3).choice(len(x), size=50, replace=False))
    # reference: the same queries against everything (queries first, excluded from their own neighbours)
    order = np.concatenate([queries, np.setdiff1d(np.arange(len(x)), queries)])
    expected = retrieval_metrics(x[queries], labels[queries], x[order], labels[order], ref_includes_query=True)
    assert got.pop("num_queries") == 50
    assert got == pytest.approx(expected, abs=1e-12)


def test_ivf_with_every_list_probed_is_exact(data):
    path, x, labels = data
    got = retrieval_metrics_from_file(
        path, labels, approx="ivf", approx_params={"nlist": 8, "nprobe": 8}, recall_sample=100
    )
    assert got.pop("approx_recall_at_1") == 1.0 and got.pop("approx_recall_sample") == 100
    assert got.pop("approx_nprobe") == 8 and got.pop("approx_nlist") == 8
    assert got == pytest.approx(retrieval_metrics(x, labels), abs=1e-9)


@pytest.mark.parametrize("method,params", [("ivf", {"nlist": 32, "nprobe": 1}), ("hnsw", {"M": 4, "efSearch": 4})])
def test_reported_recall_matches_a_brute_force_check(data, method, params):
    import faiss

    path, x, labels = data
    got = retrieval_metrics_from_file(path, labels, approx=method, approx_params=params, recall_sample=len(x), seed=1)
    # independent check: build the same index, compare its first non-self neighbour's distance with brute force
    dist = torch.cdist(torch.from_numpy(x).double(), torch.from_numpy(x).double()).pow(2)
    dist.fill_diagonal_(float("inf"))
    exact = dist.min(dim=1).values.numpy()
    if method == "ivf":
        index = faiss.IndexIVFFlat(faiss.IndexFlatL2(x.shape[1]), x.shape[1], params["nlist"])
        train = np.sort(np.random.default_rng(1).choice(len(x), size=min(len(x), 40 * params["nlist"]), replace=False))
        index.cp.seed = 1  # the k-means of the lists is seeded with the call's seed
        index.train(x[train])
        index.nprobe = params["nprobe"]
    else:
        index = faiss.IndexHNSWFlat(x.shape[1], params["M"])
        index.hnsw.efConstruction = 40
        index.hnsw.efSearch = params["efSearch"]
    index.add(x)
    d, i = index.search(x, 2)
    own = i == np.arange(len(x))[:, None]
    d = np.where(own | (i < 0), np.inf, d).min(axis=1)
    expected = float(np.mean(d <= exact * (1 + 1e-5) + 1e-12))
    assert got["approx_recall_at_1"] == pytest.approx(expected, abs=2 / len(x))
    assert 0.0 < got["approx_recall_at_1"] < 1.0  # these settings are deliberately too coarse to be exact


def test_hostile_inputs_are_reported(data, tmp_path):
    path, x, labels = data
    bad = x.copy()
    bad[5, 2] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    with pytest.raises(ValueError, match="NaN"):
        retrieval_metrics_from_file(tmp_path / "nan.npy", labels)
    with pytest.raises(ValueError, match="does not exist"):
        retrieval_metrics_from_file(tmp_path / "missing.npy", labels)
    with pytest.raises(ValueError, match="one label per"):
        retrieval_metrics_from_file(path, labels[:-1])
    with pytest.raises(ValueError, match="integer"):
        retrieval_metrics_from_file(path, labels + 0.5)
    with pytest.raises(ValueError, match="budget_mb"):
        retrieval_metrics_from_file(path, labels, budget_mb=0.001)
    with pytest.raises(ValueError, match="approx"):
        retrieval_metrics_from_file(path, labels, approx="lsh")
    with pytest.warns(RuntimeWarning, match="undefined"):
        out = retrieval_metrics_from_file(path, np.arange(len(x)))
    assert all(np.isnan(v) for v in out.values())


def test_bench_approx_runs_on_a_small_gallery(capsys):
    from benchmarks.retrieval_large import main

    assert main(["--approx", "--n", "3000", "--dim", "8", "--queries", "300", "--recall-sample", "100", "--exact"]) == 0
    out = capsys.readouterr().out
    assert "approx (ivf)" in out and "exact (stream)" in out and "recall@1 vs exact on 100 sampled queries" in out


def test_streamed_clustering_equals_in_memory_when_it_fits_and_stays_close_on_a_sample(data):
    from dmlkit.evaluation import clustering_metrics
    from dmlkit.evaluation.streaming import clustering_metrics_from_file

    path, x, labels = data
    expected = clustering_metrics(x, labels, seed=2)
    whole = clustering_metrics_from_file(path, labels, seed=2)
    assert whole.pop("sample_size") == len(x) and whole.pop("num_clusters") == 120
    assert whole == pytest.approx(expected, abs=1e-12)
    # room for the 120 centroids and 700 rows of d=8 (4 d bytes each): a sample of 350, assignment in 2 blocks
    sampled = clustering_metrics_from_file(path, labels, seed=2, budget_mb=(120 + 700) * 4 * 8 / 2**20)
    assert sampled["sample_size"] == 350
    assert sampled["NMI"] == pytest.approx(expected["NMI"], abs=0.1)
    with pytest.raises(ValueError, match="budget_mb"):
        clustering_metrics_from_file(path, labels, budget_mb=1e-4)
