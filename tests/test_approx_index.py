"""Approximate evaluation: parameters from the data size, search tuned to a recall, saved indexes checked."""

from __future__ import annotations

import math

import faiss
import numpy as np
import pytest
import torch

from dmlkit.evaluation import retrieval_metrics
from dmlkit.evaluation.approx_index import (
    build_index,
    load_index,
    plan_index,
    recall_at_1,
    search_ladder,
    set_search_param,
    tune_search,
)
from dmlkit.evaluation.streaming import retrieval_metrics_from_file


def low_dim_data(n: int = 3000, d: int = 32, latent: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Classes in a ``latent``-dimensional subspace of ``R^d`` (like a trained model's embeddings), unit norm."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, n // 5, size=n)
    centres = rng.standard_normal((n // 5, latent))
    z = centres[labels] + 0.3 * rng.standard_normal((n, latent))
    basis = np.linalg.qr(rng.standard_normal((d, latent)))[0]
    x = z @ basis.T + 0.01 * rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), labels


def brute_nearest(x: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Squared distance from each row ``ids`` to its nearest other row, float64 brute force."""
    dist = torch.cdist(torch.from_numpy(x[ids]).double(), torch.from_numpy(x).double()).pow(2)
    dist[torch.arange(len(ids)), torch.from_numpy(ids)] = math.inf
    return dist.min(dim=1).values.numpy()


def test_build_parameters_follow_the_data_size_and_can_be_overridden():
    assert plan_index(1_000_000, "ivf").nlist == 1000 and plan_index(1_000_000, "ivf").train_size == 40_000
    assert plan_index(1000, "ivf").nlist == 1000 // 39  # small sets: at least 39 training rows per list
    assert plan_index(60, "ivf_sq8").train_size == 40 and plan_index(30, "ivf").nlist == 1
    plan = plan_index(10_000, "ivf", {"nlist": 50, "nprobe": 500})
    assert (plan.nlist, plan.search_param) == (50, 50)  # nprobe capped at nlist
    hnsw = plan_index(10_000, "hnsw", {"M": 8})
    assert (hnsw.M, hnsw.ef_construction, hnsw.search_param) == (8, 40, None)
    with pytest.raises(ValueError, match="do not apply"):
        plan_index(100, "hnsw", {"nprobe": 4})
    with pytest.raises(ValueError, match="positive integer"):
        plan_index(100, "ivf", {"nlist": 0})
    with pytest.raises(ValueError, match="approx must be"):
        plan_index(100, "lsh")


@pytest.mark.parametrize("method", ["ivf", "hnsw"])
def test_tuning_picks_the_cheapest_ladder_value_that_reaches_the_target(method):
    x, _ = low_dim_data(n=2000, d=16, latent=8 if method == "ivf" else 16)
    plan = plan_index(len(x), method, {"nlist": 40} if method == "ivf" else {"M": 4, "efConstruction": 16})
    index = build_index(plan, lambda s, e: x[s:e], len(x), x.shape[1], 512, seed=0)
    ids = np.sort(np.random.default_rng(1).choice(len(x), 300, replace=False))
    exact = brute_nearest(x, ids)
    target = 0.95 if method == "ivf" else 0.97
    chosen, curve = tune_search(index, x, x[ids], ids, exact, target_recall=target)
    # reference: every ladder value's recall from a plain faiss search against the brute-force distances
    reference = []
    for value in search_ladder(index):
        set_search_param(index, value)
        d, i = index.search(x[ids], 2)
        d = np.where(i == ids[:, None], np.inf, d).min(axis=1)
        reference.append(float(np.mean(d <= exact * (1 + 1e-5) + 1e-12)))
    # reached: the one-sided 95% Wilson lower bound on the 300 tuning queries is at least the target
    z, m = 1.6448536269514722, 300
    lower = [
        (r + z * z / (2 * m) - z * math.sqrt(r * (1 - r) / m + z * z / (4 * m * m))) / (1 + z * z / m)
        for r in reference
    ]
    first = next(v for v, r, lo in zip(search_ladder(index), reference, lower) if lo >= target or r == 1.0)
    assert chosen == first
    assert [p.recall for p in curve] == pytest.approx(reference[: len(curve)])
    assert [p.lower for p in curve] == pytest.approx(lower[: len(curve)])
    naive = next(v for v, r in zip(search_ladder(index), reference) if r >= target)
    assert naive < chosen  # on 300 queries the bound asks for more than the measured recall alone


def test_auto_mode_reaches_the_target_on_an_independent_sample_and_keeps_the_metrics():
    x, y = low_dim_data()
    exact = retrieval_metrics(x, y)
    for method in ("ivf", "ivf_sq8", "hnsw"):
        got = retrieval_metrics_from_file(x, y, approx=method, recall_sample=500, tune_sample=500, seed=0)
        assert got["approx_target_reached"] == 1.0 and got["approx_tune_sample"] == 500
        assert got["approx_recall_at_1"] >= 0.9, method  # measured on 500 queries the tuning did not see
        assert got["precision_at_1"] == pytest.approx(exact["precision_at_1"], abs=0.05), method
    # the reported recall is that of the chosen setting, checked independently on the report sample
    got = retrieval_metrics_from_file(x, y, approx="ivf", recall_sample=500, tune_sample=500, seed=0)
    order = np.random.default_rng(0).permutation(len(x))
    report = np.sort(order[:500])
    plan = plan_index(len(x), "ivf", {"nprobe": int(got["approx_nprobe"])})
    index = build_index(plan, lambda s, e: x[s:e], len(x), x.shape[1], 10**6, seed=0)
    assert got["approx_recall_at_1"] == recall_at_1(index, x, x[report], report, brute_nearest(x, report))


def test_a_target_no_setting_reaches_warns_and_reports_it():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1500, 64)).astype(np.float32)  # isotropic: the hard case
    y = rng.integers(0, 300, 1500)
    with pytest.warns(RuntimeWarning, match="exact search"):
        got = retrieval_metrics_from_file(
            x, y, approx="hnsw", approx_params={"M": 2}, target_recall=1.0, recall_sample=200, tune_sample=200
        )
    assert got["approx_target_reached"] == 0.0 and got["approx_efSearch"] == 2048


def test_a_saved_index_is_used_and_checked_against_the_embeddings(tmp_path):
    from dmlkit.search import IndexConfig, SearchIndex

    x, y = low_dim_data(n=1000)
    np.save(tmp_path / "emb.npy", x)
    SearchIndex.build(x, IndexConfig(mode="ivf", nlist=8, nprobe=8)).save(tmp_path / "idx")
    got = retrieval_metrics_from_file(
        tmp_path / "emb.npy", y, index_file=tmp_path / "idx", approx_params={"nprobe": 8}, recall_sample=200
    )
    assert (
        got.pop("approx_recall_at_1") == 1.0
        and got.pop("approx_nprobe") == 8
        and got.pop("approx_recall_sample") == 200
    )
    assert got == pytest.approx(retrieval_metrics(x, y), abs=1e-9)
    with pytest.raises(
        ValueError, match=r"holds 1000 vectors of dimension 32 but the embeddings are 999 x 32.*rebuild"
    ):
        retrieval_metrics_from_file(x[:-1], y[:-1], index_file=tmp_path / "idx")
    with pytest.raises(ValueError, match=r"dimension 32 but the embeddings are 1000 x 16.*rebuild"):
        load_index(tmp_path / "idx", 1000, 16)
    with pytest.raises(ValueError, match="build parameters"):
        retrieval_metrics_from_file(x, y, index_file=tmp_path / "idx", approx_params={"nlist": 4})
    with pytest.raises(ValueError, match="searched with nprobe"):
        retrieval_metrics_from_file(x, y, index_file=tmp_path / "idx", approx_params={"efSearch": 4})
    SearchIndex.build(x, IndexConfig(mode="hnsw", m=8)).save(tmp_path / "hnsw")
    tuned = retrieval_metrics_from_file(x, y, index_file=tmp_path / "hnsw", recall_sample=200, tune_sample=200)
    assert tuned["approx_efSearch"] >= 16 and tuned["approx_target_reached"] == 1.0
    with pytest.raises(ValueError, match="dmlkit index build"):
        retrieval_metrics_from_file(x, y, index_file=tmp_path / "missing")
    (tmp_path / "junk.faiss").write_bytes(b"not an index")
    with pytest.raises(ValueError, match="not a faiss index"):
        retrieval_metrics_from_file(x, y, index_file=tmp_path / "junk.faiss")


def test_nan_rows_in_the_gallery_are_refused_built_or_loaded(tmp_path):
    x, y = low_dim_data(n=1000)
    index = faiss.IndexFlatL2(x.shape[1])
    index.add(x)
    faiss.write_index(index, str(tmp_path / "flat.faiss"))
    bad = x.copy()
    bad[777, 3] = np.nan
    for kwargs in ({"approx": "hnsw"}, {"approx": "ivf"}, {"index_file": tmp_path / "flat.faiss"}):
        with pytest.raises(ValueError, match="NaN.*check the model output"):
            retrieval_metrics_from_file(bad, y, recall_sample=10, tune_sample=10, **kwargs)
    with pytest.raises(ValueError, match="positive number of queries"):
        retrieval_metrics_from_file(x, y, approx="ivf", tune_sample=0)
    with pytest.raises(ValueError, match="target_recall"):
        retrieval_metrics_from_file(x, y, approx="ivf", target_recall=1.5)


def test_bench_retrieval_approx_prints_the_tradeoff_and_writes_the_plot(tmp_path, capsys):
    from benchmarks.retrieval import main

    png = tmp_path / "tradeoff.png"
    argv = ["--approx", "--n", "3000", "--dim", "8", "--queries", "200", "--tune-sample", "200", "--plot", str(png)]
    assert main(argv + ["--data", "latent", "--latent-dim", "4"]) == 0
    out = capsys.readouterr().out
    assert "exact (streamed)" in out and "ivf nlist=55" in out and "ivf_sq8 nlist=55" in out and "hnsw M=32" in out
    assert out.count(" *") == 3  # one tuned choice per index
    assert "reaches 0.95" in out and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ivf_sq8_reranked_by_exact_distance_from_the_file_gives_the_exact_metrics(tmp_path):
    x, y = low_dim_data(n=1000, d=32, latent=8)
    np.save(tmp_path / "emb.npy", x)
    exact = retrieval_metrics(x, y)
    params = {"nlist": 8, "nprobe": 8}  # every list probed: only the 8-bit quantisation is approximate
    got = retrieval_metrics_from_file(
        tmp_path / "emb.npy", y, approx="ivf_sq8", approx_params=params, recall_sample=1000
    )
    assert got.pop("approx_recall_at_1") == 1.0
    assert {k: got[k] for k in exact} == pytest.approx(exact, abs=1e-12)
    raw = retrieval_metrics_from_file(
        tmp_path / "emb.npy", y, approx="ivf_sq8", approx_params={**params, "rerank": 1}, recall_sample=1000
    )
    assert raw["approx_recall_at_1"] < 1.0  # without re-ranking the quantised distances misorder near neighbours


def test_reranked_neighbours_are_the_brute_force_neighbours_when_every_row_is_a_candidate():
    from dmlkit.evaluation.approx_index import search_neighbours

    x, _ = low_dim_data(n=300, d=16, latent=4)
    x[7] = x[3]  # an exact tie: the smaller id comes first
    plan = plan_index(len(x), "ivf_sq8", {"nlist": 4, "nprobe": 4, "rerank": 100})
    index = build_index(plan, lambda s, e: x[s:e], len(x), x.shape[1], 128, seed=0)
    ids = np.arange(0, 300, 3)
    dist, got = search_neighbours(index, x[ids], ids, 5, x, plan.rerank)
    d64 = torch.cdist(torch.from_numpy(x[ids]).double(), torch.from_numpy(x).double()).pow(2).numpy()
    d64[np.arange(len(ids)), ids] = np.inf
    expected = np.lexsort((np.broadcast_to(np.arange(300), d64.shape), d64), axis=1)[:, :5]
    assert (got == expected).all()
    assert dist == pytest.approx(np.take_along_axis(d64, expected, 1), rel=1e-9)
