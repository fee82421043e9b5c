"""Retrieval metrics over 2 gloo processes (``sharded_retrieval_metrics``) equal one process's, exactly.

One spawn of two CPU processes runs every case; the reference is ``retrieval_metrics`` in this
process on the whole sets. The data are small integer grids, so many pairs of points are at
exactly the same distance (ties decided by the smaller gallery index, across shards), shards
are uneven, the gallery goes round in several blocks (a budget of ``MIN_BLOCK_ROWS`` rows),
and one class lives only on rank 1's shard. The metrics are compared with ``==``: the
neighbour tables are identical, and each query's contribution is summed in the same order
as one process sums it, so even R-precision and MAP@R (float64 sums) match bit for bit.

Bad input (a budget below one block, NaN rows in one rank's gallery, a gallery shard of
another dimension) must raise a ``ValueError`` naming the fix on *both* ranks; the spawn
runs under a deadline, so a rank left waiting in a collective fails the test instead of
hanging it.
"""

from __future__ import annotations

import os
import time
import warnings

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from dmlkit.distributed import shard_indices
from dmlkit.evaluation import MIN_BLOCK_ROWS, retrieval_metrics, sharded_retrieval_metrics

KS = (1, 2, 4, 8)
D = 3
N_QUERY, N_GALLERY = 301, 187
#: rank 0 holds gallery rows 0..119, rank 1 the rest (uneven, contiguous: the default ids)
SPLIT = 120
#: a budget whose blocks hold MIN_BLOCK_ROWS rows of dimension D: several blocks per shard
BUDGET_MB = (MIN_BLOCK_ROWS * (8 * D + 8) * 4 / 3 + 64) / 2**20
DEADLINE_S = 90


def _data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    x = torch.randint(-2, 3, (N_QUERY, D), generator=g).float()  # 125 grid points: many equal distances
    y = torch.randint(0, 9, (N_QUERY,), generator=g)
    y[[5, 7, 33]] = 99  # odd positions: this class's queries are all on rank 1 (shard_indices)
    r = torch.randint(-2, 3, (N_GALLERY, D), generator=g).float()
    ry = torch.randint(0, 9, (N_GALLERY,), generator=g)
    ry[[150, 170]] = 98  # only in rank 1's gallery shard
    ry[[10]] = 99
    return x, y, r, ry


def _cases(rank: int, world: int) -> dict[str, dict[str, float]]:
    x, y, r, ry = _data()
    qi = shard_indices(N_QUERY, rank, world)
    gs = slice(0, SPLIT) if rank == 0 else slice(SPLIT, N_GALLERY)
    out = {
        # self-retrieval, strided query ids, gallery = the query shards
        "self": sharded_retrieval_metrics(x[qi], y[qi], ks=KS, query_ids=qi, budget_mb=BUDGET_MB),
        # queries against a gallery sharded contiguously (default ids)
        "cross": sharded_retrieval_metrics(x[qi], y[qi], r[gs], ry[gs], ks=KS, query_ids=qi, budget_mb=BUDGET_MB),
    }
    # the same gallery sharded by stride, each shard handed over in reverse id order
    gi = shard_indices(N_GALLERY, rank, world).flip(0)
    out["cross_unsorted"] = sharded_retrieval_metrics(
        x[qi], y[qi], r[gi], ry[gi], ks=KS, query_ids=qi, reference_ids=gi, budget_mb=BUDGET_MB
    )
    # the gallery starts with the queries (ref_includes_query); gallery ids strided, in reverse local order
    full, full_y = torch.cat([x, r]), torch.cat([y, ry])
    gi = shard_indices(len(full), rank, world).flip(0)
    out["includes_query"] = sharded_retrieval_metrics(
        x[qi],
        y[qi],
        full[gi],
        full_y[gi],
        ks=KS,
        query_ids=qi,
        reference_ids=gi,
        ref_includes_query=True,
        budget_mb=BUDGET_MB,
    )
    # all queries on rank 0, rank 1 holds none (an empty (0, d) shard)
    q0 = slice(0, N_QUERY) if rank == 0 else slice(0, 0)
    out["empty_shard"] = sharded_retrieval_metrics(x[q0], y[q0], r[gs], ry[gs], ks=KS, budget_mb=BUDGET_MB)
    return out


def _errors(rank: int) -> dict[str, str]:
    x, y, r, ry = _data()
    qi = shard_indices(N_QUERY, rank, 2)
    gs = slice(0, SPLIT) if rank == 0 else slice(SPLIT, N_GALLERY)
    gallery = r[gs].clone()
    nan_gallery = gallery.clone()
    if rank == 1:
        nan_gallery[3, 1] = float("nan")
    wide = torch.cat([gallery, torch.zeros(len(gallery), 1)], dim=1) if rank == 1 else gallery
    calls = {
        "budget": lambda: sharded_retrieval_metrics(x[qi], y[qi], gallery, ry[gs], query_ids=qi, budget_mb=0.001),
        "nan": lambda: sharded_retrieval_metrics(x[qi], y[qi], nan_gallery, ry[gs], query_ids=qi),
        "dimension": lambda: sharded_retrieval_metrics(x[qi], y[qi], wide, ry[gs], query_ids=qi),
    }
    out = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = "no error"
        except ValueError as err:
            out[name] = f"ValueError: {err}"
    return out


def _worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            results = {"metrics": _cases(rank, world), "errors": _errors(rank)}
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("sharded_eval")
    context = mp.spawn(_worker, args=(2, str(tmp / "init"), str(tmp)), nprocs=2, join=False)
    deadline = time.monotonic() + DEADLINE_S
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for p in context.processes:
                if p.is_alive():
                    p.kill()
            pytest.fail(f"the 2-process evaluation did not finish in {DEADLINE_S} s: a rank hangs in a collective")
    return [torch.load(tmp / f"rank{r}.pt", weights_only=True) for r in range(2)]


def _single_process() -> dict[str, dict[str, float]]:
    x, y, r, ry = _data()
    full, full_y = torch.cat([x, r]), torch.cat([y, ry])
    return {
        "self": retrieval_metrics(x, y, ks=KS),
        "cross": retrieval_metrics(x, y, r, ry, ks=KS),
        "cross_unsorted": retrieval_metrics(x, y, r, ry, ks=KS),
        "includes_query": retrieval_metrics(x, y, full, full_y, ks=KS, ref_includes_query=True),
        "empty_shard": retrieval_metrics(x, y, r, ry, ks=KS),
    }


@pytest.mark.parametrize("case", ["self", "cross", "cross_unsorted", "includes_query", "empty_shard"])
def test_two_processes_give_the_single_process_metrics_exactly(two_ranks, case):
    expected = _single_process()[case]
    assert 0 < expected["precision_at_1"] < 1 and 0 < expected["mean_average_precision_at_r"] < 1
    for rank, results in enumerate(two_ranks):
        assert results["metrics"][case] == expected, f"rank {rank}"


def test_the_data_have_ties_that_decide_the_metrics():
    """Guards the test data: ranking tied neighbours by the larger index instead changes the metrics."""
    x, y, _, _ = _data()
    d2 = torch.cdist(x.double(), x.double()).pow(2)
    d2.fill_diagonal_(float("inf"))
    n = len(x)
    # lexicographic (distance, index) and (distance, -index) orders; first neighbour of each query
    by_small = (d2 * (2 * n) + torch.arange(n)).argmin(dim=1)
    by_large = (d2 * (2 * n) - torch.arange(n)).argmin(dim=1)
    assert (y[by_small] != y[by_large]).sum() > 10


@pytest.mark.parametrize(
    "case, fix",
    [
        ("budget", "raise budget_mb to at least"),
        ("nan", "NaN or infinite values"),
        ("dimension", "embed every shard with the same model"),
    ],
)
def test_bad_input_raises_on_every_rank(two_ranks, case, fix):
    messages = [results["errors"][case] for results in two_ranks]
    for message in messages:
        assert message.startswith("ValueError") and fix in message, message
    assert messages[0] == messages[1]
    if case == "nan":
        assert "rank 1 of 2" in messages[0] and "reference" in messages[0]


def test_one_process_without_a_group_is_retrieval_metrics_in_id_order():
    x, y, r, ry = _data()
    perm = torch.randperm(N_QUERY, generator=torch.Generator().manual_seed(1))
    gperm = torch.randperm(N_GALLERY, generator=torch.Generator().manual_seed(2))
    got = sharded_retrieval_metrics(x[perm], y[perm], r[gperm], ry[gperm], ks=KS, query_ids=perm, reference_ids=gperm)
    assert got == retrieval_metrics(x, y, r, ry, ks=KS)
    with pytest.raises(ValueError, match="budget_mb"):
        sharded_retrieval_metrics(x, y, ks=KS, budget_mb=0.001)
    with pytest.raises(ValueError, match="shard_indices"):
        sharded_retrieval_metrics(x, y, ks=KS, query_ids=np.arange(N_QUERY) + 1)


@pytest.mark.slow
def test_torchrun_training_and_evaluate_report_the_one_process_metrics(tmp_path):
    """End to end: a 2-process run's test metrics (trainer, sharded) and ``torchrun ... dmlkit evaluate``
    equal ``dmlkit evaluate`` of the same checkpoint in one process."""
    import json

    from dmlkit.assemble import evaluate_run
    from tests_helpers import TINY_OVERRIDES, torchrun

    run_dir = tmp_path / "run"
    sets = [a for o in TINY_OVERRIDES + ["plots=false"] for a in ("--set", o)]
    done = torchrun(["train", "configs/quickstart.yaml", *sets, "--run-dir", str(run_dir), "--quiet"])
    assert done.returncode == 0, done.stderr[-3000:]
    trained = json.loads((run_dir / "summary.json").read_text())["test"]
    one = evaluate_run(run_dir)
    assert trained == one
    done = torchrun(["evaluate", str(run_dir)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == one  # printed once, by rank 0
    assert json.loads((run_dir / "eval_test.json").read_text())["precision_at_1"] == one["precision_at_1"]


@pytest.mark.slow
def test_torchrun_queries_against_a_gallery_report_the_one_process_metrics(tmp_path):
    """The same with a query split against a gallery split (In-shop layout), clustering on: the trainer's
    validation and test search the gallery shards; ``dmlkit evaluate --split query`` under torchrun agrees."""
    import json

    import dataset_miniatures as M
    from dmlkit.assemble import evaluate_run
    from tests_helpers import TINY_OVERRIDES, torchrun

    root = M.write_inshop(tmp_path / "data", train_items=24, test_items=6)
    overrides = TINY_OVERRIDES + [
        "data.name=inshop",
        f"data.root={root}",
        "data.max_classes=null",
        "data.val_fraction=0",
        "eval.split=query",
        "eval.reference_split=gallery",
        "eval.clustering=true",
        "plots=false",
        "train.max_steps=2",
        "train.val_every=2",
        "train.batch_size=12",
    ]
    run_dir = tmp_path / "run"
    sets = [a for o in overrides for a in ("--set", o)]
    done = torchrun(["train", "configs/quickstart.yaml", *sets, "--run-dir", str(run_dir), "--quiet"])
    assert done.returncode == 0, done.stderr[-3000:]
    one = evaluate_run(run_dir, "query")
    assert {"NMI", "F1", "precision_at_1"} <= set(one)
    assert json.loads((run_dir / "summary.json").read_text())["test"] == one
    done = torchrun(["evaluate", str(run_dir), "--split", "query"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == one
