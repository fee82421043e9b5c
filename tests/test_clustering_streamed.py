"""Clustering metrics at scale: k-means on a sample, assignment streamed within a budget."""

from __future__ import annotations

import re

import faiss
import numpy as np
import pytest
import torch

from dmlkit.evaluation import clustering_metrics, nmi, pairwise_f1
from dmlkit.evaluation.clustering_streamed import clustering_metrics_from_file, clustering_plan


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(4)
    n, d, k = 900, 6, 30
    labels = rng.integers(0, k, size=n)
    x = (3 * rng.standard_normal((k, d))[labels] + rng.standard_normal((n, d))).astype(np.float32)
    path = tmp_path_factory.mktemp("emb") / "emb.npy"
    np.save(path, x)
    return path, x, labels


def test_the_whole_set_as_sample_equals_the_in_memory_clustering(data):
    path, x, labels = data
    for seed in (0, 5):
        got = clustering_metrics_from_file(path, labels, seed=seed)
        assert got.pop("sample_size") == len(x) and got.pop("num_clusters") == 30
        assert got == clustering_metrics(x, labels, seed=seed)  # exactly, not approximately
    # several assignment blocks (room for 30 centroids + 900 sample rows + 100 block rows): still exact
    small = clustering_metrics_from_file(
        path, labels, seed=0, sample_size=900, budget_mb=(30 + 900 + 100) * 4 * 6 / 2**20
    )
    assert clustering_plan(900, 6, 30, (30 + 900 + 100) * 4 * 6 / 2**20, 900) == (900, 100)
    assert small == clustering_metrics_from_file(path, labels, seed=0)


def test_sampled_centroids_and_streamed_assignment_match_a_brute_force_reference(data):
    path, x, labels = data
    budget = (30 + 200 + 64) * 4 * 6 / 2**20  # a sample of 200 rows, then blocks of 64 rows
    assert clustering_plan(900, 6, 30, budget, 200) == (200, 64)
    got = clustering_metrics_from_file(path, labels, seed=3, sample_size=200, budget_mb=budget)
    assert got["sample_size"] == 200
    # reference: the same seeded sample and k-means, then every row to its nearest centroid in float64
    picks = np.sort(np.random.default_rng(3).choice(len(x), size=200, replace=False))
    km = faiss.Kmeans(6, 30, niter=20, nredo=1, seed=3, verbose=False, min_points_per_centroid=1)
    km.train(np.ascontiguousarray(x[picks]))
    assign = torch.cdist(torch.from_numpy(x).double(), torch.from_numpy(km.centroids).double()).argmin(dim=1).numpy()
    assert got["NMI"] == pytest.approx(nmi(labels, assign), abs=1e-12)
    assert got["F1"] == pytest.approx(pairwise_f1(labels, assign), abs=1e-12)
    assert got["NMI"] != pytest.approx(clustering_metrics(x, labels, seed=3)["NMI"], abs=1e-9)  # a real sample


def test_default_sample_fills_the_budget_up_to_256_per_cluster():
    assert clustering_plan(10**6, 128, 1000, 1024)[0] == 256_000
    rows = 256 * 2**20 // 512  # rows of d=128 in 256 MB
    s, b = clustering_plan(10**6, 128, 100_000, 256)
    assert s == (rows - 100_000) // 2 and s + b + 100_000 <= rows  # the rows after the centroids, shared evenly
    s, b = clustering_plan(10**6, 128, 200_000, 256)
    assert s == 200_000 and b == rows - 400_000  # never fewer sample rows than clusters


def test_a_budget_too_small_names_the_least_that_works(data):
    path, x, labels = data
    with pytest.raises(ValueError, match="raise budget_mb to at least") as err:
        clustering_metrics_from_file(path, labels, budget_mb=1e-4)
    least = float(re.search(r"at least ([0-9.]+)", str(err.value)).group(1))
    assert clustering_metrics_from_file(path, labels, budget_mb=least)["sample_size"] >= 30
    with pytest.raises(ValueError, match="lower sample_size"):
        clustering_metrics_from_file(path, labels, budget_mb=least, sample_size=900)
    with pytest.raises(ValueError, match="at least the 30 clusters"):
        clustering_metrics_from_file(path, labels, sample_size=10)
    with pytest.raises(ValueError, match="budget_mb must be a positive"):
        clustering_metrics_from_file(path, labels, budget_mb=0)


def test_nan_rows_are_refused(data, tmp_path):
    _, x, labels = data
    bad = x.copy()
    bad[801, 0] = np.nan
    np.save(tmp_path / "bad.npy", bad)
    with pytest.raises(ValueError, match="NaN.*check the model output"):
        clustering_metrics_from_file(tmp_path / "bad.npy", labels)  # in the sample
    with pytest.raises(ValueError, match=r"NaN.*rows 800\.\.|NaN.*sample"):
        clustering_metrics_from_file(
            tmp_path / "bad.npy", labels, sample_size=30, budget_mb=(30 + 30 + 100) * 4 * 6 / 2**20
        )


def test_bench_clustering_large_reports_the_sample_and_the_in_memory_reference(capsys):
    from benchmarks.clustering_large import main

    assert main(["--n", "3000", "--dim", "8", "--per-class", "60", "--sample-sizes", "500,3000", "--compare"]) == 0
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines()[2:]]
    assert [line[:2] for line in lines] == [["streamed", "500"], ["streamed", "3,000"], ["in", "memory"]]
    assert lines[1][-2:] == ["+0.0000", "+0.0000"]  # the whole set as the sample is the in-memory clustering
