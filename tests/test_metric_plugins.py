"""A retrieval metric registered from outside the library reaches every evaluation path.

Two toy metrics, registered from this test and removed after it: mean reciprocal rank (one value) and the
precision among the k nearest (one value per k). Each is checked against a brute-force ranking of tiny data, in
the exact search, the streamed search over a ``.npy`` file, the sharded search over two gloo processes, a
training run and ``dmlkit evaluate`` (the metric comes from a plug-in file the config imports), and a protocol
table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from dmlkit.evaluation import (
    metric_names,
    register_retrieval_metric,
    retrieval_metrics,
    retrieval_metrics_from_file,
    sharded_retrieval_metrics,
    unregister_retrieval_metric,
)
from dmlkit.protocols.table import markdown_table

ROOT = Path(__file__).resolve().parents[1]
KS = (1, 2, 4)
TOY = ["reciprocal_rank", "precision_among_{k}"]

PLUGIN = """
import numpy as np
from dmlkit.evaluation import register_retrieval_metric


@register_retrieval_metric("reciprocal_rank", short="MRR")
def reciprocal_rank(match, big_r):
    first = match.argmax(axis=1)
    return np.where(match.any(axis=1), 1.0 / (first + 1), 0.0)


@register_retrieval_metric("precision_among_{k}", per_k=True, short="P{k}")
def precision_among(match, big_r, k):
    return match[:, :k].mean(axis=1)
"""


def _register() -> None:
    namespace: dict = {}
    exec(PLUGIN, namespace)


@pytest.fixture
def toy_metrics():
    _register()
    yield
    for name in TOY:
        unregister_retrieval_metric(name)


def _brute_force(x: np.ndarray, y: np.ndarray, r: np.ndarray | None = None, ry: np.ndarray | None = None) -> dict:
    """Both toy metrics by sorting every query's float64 distances (self excluded when ``r`` is None), over the
    ``K = max(max_i R_i, max(ks))`` nearest neighbours that every metric sees."""
    self_search = r is None
    r, ry = (x, y) if self_search else (r, ry)
    d = ((x[:, None, :].astype(np.float64) - r[None, :, :]) ** 2).sum(-1)
    if self_search:
        np.fill_diagonal(d, np.inf)
    relevant = np.array([int((ry == label).sum()) - int(self_search) for label in y])
    depth = min(len(r) - int(self_search), max(int(relevant.max()), *KS))
    rr, prec = [], {k: [] for k in KS}
    for i in range(len(x)):
        if relevant[i] == 0:
            continue
        match = ry[np.argsort(d[i], kind="stable")[:depth]] == y[i]
        rr.append(1.0 / (np.flatnonzero(match)[0] + 1) if match.any() else 0.0)
        for k in KS:
            prec[k].append(match[:k].mean())
    return {"reciprocal_rank": np.mean(rr), **{f"precision_among_{k}": np.mean(v) for k, v in prec.items()}}


def _data(seed: int = 0, n: int = 60, m: int = 45) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    x, r = rng.normal(size=(n, 4)).astype(np.float32), rng.normal(size=(m, 4)).astype(np.float32)
    y, ry = rng.integers(0, 6, n), rng.integers(0, 6, m)
    y[0] = 77  # a lone query: left out, as for the built-in metrics
    return x, y, r, ry


def test_a_registered_metric_is_computed_by_the_exact_and_the_streamed_search(toy_metrics, tmp_path):
    x, y, r, ry = _data()
    assert metric_names(KS)[-4:] == ["reciprocal_rank", "precision_among_1", "precision_among_2", "precision_among_4"]
    expected_self, expected_cross = _brute_force(x, y), _brute_force(x, y, r, ry)
    out_self, out_cross = retrieval_metrics(x, y, ks=KS), retrieval_metrics(x, y, r, ry, ks=KS)
    np.save(tmp_path / "emb.npy", x)
    streamed = retrieval_metrics_from_file(tmp_path / "emb.npy", y, ks=KS)
    for name, value in expected_self.items():
        assert out_self[name] == pytest.approx(value, abs=1e-12)
        assert streamed[name] == pytest.approx(value, abs=1e-12)
        assert out_cross[name] == pytest.approx(expected_cross[name], abs=1e-12)
    assert out_self["precision_among_1"] == out_self["precision_at_1"]
    assert 0.2 < out_self["reciprocal_rank"] < 0.9 and out_self["precision_among_4"] != out_self["precision_among_2"]


def test_unregistered_metrics_are_gone_and_bad_registrations_are_refused(toy_metrics):
    with pytest.raises(ValueError, match="registered twice"):
        _register()
    with pytest.raises(ValueError, match="per_k=True needs"):
        register_retrieval_metric("precision_among_k", per_k=True)
    with pytest.raises(ValueError, match="no retrieval metric 'nope'"):
        unregister_retrieval_metric("nope")
    unregister_retrieval_metric("reciprocal_rank")
    assert "reciprocal_rank" not in retrieval_metrics(*_data()[:2], ks=KS)
    _register_one_back()


def _register_one_back() -> None:
    register_retrieval_metric("reciprocal_rank")(lambda match, big_r: match[:, 0].astype(float))


def _shard_worker(rank: int, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    _register()
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        x, y, r, ry = _data()
        q, g = slice(rank, None, 2), slice(0, 20) if rank == 0 else slice(20, None)
        out = sharded_retrieval_metrics(
            torch.from_numpy(x[q]),
            torch.from_numpy(y[q]),
            torch.from_numpy(r[g]),
            torch.from_numpy(ry[g]),
            ks=KS,
            query_ids=np.arange(len(x))[q],
        )
        torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_the_sharded_search_over_two_processes_computes_it_as_one_process_does(toy_metrics, tmp_path):
    context = mp.spawn(_shard_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=False)
    deadline = time.monotonic() + 90
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for p in context.processes:
                p.kill()
            pytest.fail("the 2-process evaluation did not finish in 90 s")
    x, y, r, ry = _data()
    one = retrieval_metrics(x, y, r, ry, ks=KS)
    for rank in range(2):
        assert torch.load(tmp_path / f"rank{rank}.pt", weights_only=True) == one


@pytest.mark.slow
def test_a_plugin_metric_reaches_training_evaluate_and_the_protocol_table(tmp_path, toy_metrics):
    from tests_helpers import TINY_OVERRIDES

    (tmp_path / "toy_metrics.py").write_text(PLUGIN)
    sets = [a for o in TINY_OVERRIDES + ["plots=false", "train.max_steps=4", "eval.ks=[1,2,4]"] for a in ("--set", o)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    run = tmp_path / "run"

    def dmlkit(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "dmlkit", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
        )

    done = dmlkit(
        "train",
        "configs/quickstart.yaml",
        *sets,
        "--import",
        str(tmp_path / "toy_metrics.py"),
        "--run-dir",
        str(run),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    test = json.loads((run / "summary.json").read_text())["test"]
    val = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"val"' in line]
    assert {"reciprocal_rank", "precision_among_4"} <= set(test) and "reciprocal_rank" in val[-1]
    evaluated = dmlkit("evaluate", str(run))
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert json.loads(evaluated.stdout)["reciprocal_rank"] == test["reciprocal_rank"]
    table = markdown_table([("toy", {k: (v, 0.0) for k, v in test.items()})], "all")
    header, _, row = table.splitlines()[:3]
    assert header.split("|")[-6:-1] == [" MRR ", " P1 ", " P2 ", " P4 ", " P8 "]
    cells = [c.strip() for c in row.split("|")[-6:-1]]
    assert cells[0] == f"{test['reciprocal_rank'] * 100:.2f} ± 0.00" and cells[-1] == "n/a"  # no K = 8 in this run
