"""Retrieval metrics with the queries and the gallery sharded over the processes of a job.

:func:`sharded_retrieval_metrics` computes the metrics of
:func:`dmlkit.evaluation.retrieval_metrics` (P@1, Recall@K, R-precision, MAP@R;
same definitions, see ``retrieval.py``) when each process of a ``torchrun`` /
Lightning Fabric job holds only a shard of the queries and a shard of the
gallery (reference set), e.g. the embeddings of its ``shard_indices`` of the
dataset. No process ever holds the whole gallery, and every process returns
the same values, equal to those of one process on the whole sets.

How the shards are searched
    Every gallery shard is sorted by its global ids and cut into blocks of at
    most ``b`` rows (``b`` from ``budget_mb``, below). The owner of a block
    broadcasts it; every process searches its own query shard against it with
    the exact blocked search of ``knn.py`` (float32 candidates, certified
    float64 re-ranking) and merges the block's neighbours into its running
    top-``K`` table, ordered by (float64 squared distance, global gallery id).
    The blocks go round in a fixed order (owner 0's blocks first), so one
    block is in flight at a time.

Why the values equal one process's
    One process ranks the neighbours of a query by the float64
    direct-difference squared distance of each (query, reference) pair, exact
    ties to the smaller reference index. Here the distance of a pair is
    computed by the same function (``exact_squared_distances``), whatever block
    the reference arrives in; each block's top-``K`` is exact in the same order
    (within a block, local order is id order); and the top ``K`` of a union is
    the top ``K`` of the blocks' top-``K`` lists. The query itself (a
    self-search, or ``ref_includes_query``) is removed by id: each block is
    searched for ``K + 1`` neighbours and the query's own id dropped, which
    leaves the top ``K`` of the others. The metrics are then summed as one
    process sums them: each query's contribution (``per_query_values``, a
    function of its neighbour row alone) is gathered to every process in
    global query order and added up in the same chunks as ``retrieval.py``,
    so even the float64 sums of R-precision and MAP@R are bitwise the same.

Memory
    ``budget_mb`` bounds the gallery side on each process: the block in flight
    (``4 b d`` bytes), its augmented float32 copy in the search (``4 b (d + 2)``)
    and the score tiles (``min(32 MiB, budget / 4)``). It must hold at least
    ``MIN_BLOCK_ROWS`` rows; a smaller budget raises a ``ValueError`` saying
    how large it must be. Outside the budget: the local query shard and its
    ``(n_local_queries, K)`` tables (float64 distances and int64 ids, as one
    process holds them for all queries), and ``O(n)`` labels and ids of both
    sets (about 16 bytes per item), which every process gathers.

Bad input is refused on every process
    Each process first checks its own shards without communicating (shapes,
    finite values, labels, ids); the verdicts are then exchanged, and if any
    process found a problem every process raises the same ``ValueError``
    (naming the rank), instead of the others waiting forever in a collective.
    Checks that need every shard (dimensions of query and gallery shards,
    ids forming a permutation, the budget) run on the gathered sizes, with the
    same outcome everywhere.

Communication uses the default process group (or ``group``): gloo tensors
on the CPU, NCCL tensors on the current CUDA device. The search itself runs
on the CPU, like ``retrieval_metrics``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import Any, cast

import numpy as np
import torch
import torch.distributed as dist

from dmlkit.evaluation.knn import exact_neighbours
from dmlkit.evaluation.knn_certificate import rank_by_distance
from dmlkit.evaluation.knn_inputs import EmbeddingSource
from dmlkit.evaluation.metric_values import MetricSums, metric_names, per_query_values
from dmlkit.evaluation.relevance import relevance, undefined_metrics
from dmlkit.evaluation.retrieval import retrieval_metrics
from dmlkit.evaluation.sharded_inputs import MIN_BLOCK_ROWS, Plan, Shard, check_permutation

__all__ = ["sharded_retrieval_metrics", "MIN_BLOCK_ROWS"]

#: Query rows per chunk of the metric sums (``retrieval.metrics_from_neighbours``'s default).
_CHUNK_ELEMS = 2**22

ArrayLike = torch.Tensor | np.ndarray


class _Group:
    """The collectives this module needs, on the device the group's backend takes."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        nccl = dist.get_backend(group) == "nccl"
        self.device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")

    def objects(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def gather(self, x: torch.Tensor, sizes: Sequence[int]) -> list[torch.Tensor]:
        """Every process's ``x`` (first dimensions ``sizes``, known to all), on the CPU."""
        most = max(max(sizes), 1)
        padded = torch.zeros((most, *x.shape[1:]), dtype=x.dtype, device=self.device)
        padded[: x.shape[0]] = x.to(self.device)
        parts = [torch.empty_like(padded) for _ in range(self.world)]
        dist.all_gather(parts, padded, group=self.group)
        return [p[:s].cpu() for p, s in zip(parts, sizes)]

    def broadcast(self, x: torch.Tensor | None, shape: tuple[int, ...], dtype: torch.dtype, src: int) -> torch.Tensor:
        """``x`` of process ``src`` (group rank) on every process, on the CPU."""
        buf = x.to(self.device) if self.rank == src else torch.empty(shape, dtype=dtype, device=self.device)
        source = src if self.group is None else dist.get_global_rank(self.group, src)
        dist.broadcast(buf, source, group=self.group)
        return buf.cpu()


def sharded_retrieval_metrics(
    query: ArrayLike,
    query_labels: ArrayLike,
    reference: ArrayLike | None = None,
    reference_labels: ArrayLike | None = None,
    ks: Sequence[int] = (1, 2, 4, 8),
    *,
    query_ids: ArrayLike | None = None,
    reference_ids: ArrayLike | None = None,
    ref_includes_query: bool = False,
    budget_mb: float = 256,
    group: Any = None,
) -> dict[str, float]:
    """Retrieval metrics of queries and a gallery sharded over processes (see module docstring).

    Every process of the group calls it with its own shards; all get the same
    dict, equal to ``retrieval_metrics`` of one process on the whole sets.

    Args:
        query: this process's ``(n_local, d)`` query embeddings (may be empty, ``(0, d)``).
        query_labels: their ``(n_local,)`` labels.
        reference: this process's gallery shard, or ``None`` for self-retrieval
            (the query shards are also the gallery; each query is excluded
            from its own neighbours). Every process passes one, or none does.
        reference_labels: labels of the gallery shard.
        ks: the ``K`` of each ``recall_at_{K}``.
        query_ids: position of each local query in the whole query set
            (``shard_indices`` of a dataset, say): the shards' ids together
            must be ``0 .. n_query - 1``. Default: shards in rank order
            (rank 0's rows first), as ``all_gather`` concatenates them.
        reference_ids: the same for the gallery shard.
        ref_includes_query: the gallery's first ``n_query`` items (by id) are the
            queries; reference id ``i`` is excluded for query id ``i``.
        budget_mb: memory bound of the gallery block in flight and the search's
            score tiles on each process (see module docstring).
        group: the process group (default: the default group). Without an
            initialised process group, or with one process, this is
            ``retrieval_metrics`` of the inputs put in id order.

    Raises:
        ValueError: on every process, when any process's shards are bad
            (non-finite, not 2-D, labels or ids that do not match), the
            dimensions of the shards differ, the ids are not a permutation, or
            the budget cannot hold one block.
    """
    make_shard = partial(
        Shard,
        query,
        query_labels,
        reference,
        reference_labels,
        ks,
        query_ids,
        reference_ids,
        ref_includes_query,
        budget_mb,
    )
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) == 1:
        return _one_process(make_shard())
    comm = _Group(group)
    try:  # local checks first: no process raises while the others wait in a collective
        shard = make_shard()
        verdict: Any = shard.summary()
    except ValueError as err:
        shard, verdict = None, str(err)
    verdicts = comm.objects(verdict)
    bad = [(r, v) for r, v in enumerate(verdicts) if isinstance(v, str)]
    if bad:
        r, message = bad[0]
        raise ValueError(f"sharded evaluation: rank {r} of {comm.world}: {message}")
    return _run(comm, cast(Shard, shard), Plan(verdicts))


def _one_process(shard: Shard) -> dict[str, float]:
    """One process: the ids only reorder the queries, and the exact search gives the metrics."""
    plan = Plan([shard.summary()])
    for name, ids, n in (("query_ids", shard.q_ids, plan.n_query), ("reference_ids", shard.g_ids, plan.n_gallery)):
        if ids is not None:
            check_permutation(name, [ids], n)
    q, ql = shard.q, shard.ql
    if shard.q_ids is not None:
        q_order = np.argsort(shard.q_ids, kind="stable")
        q, ql = q[torch.from_numpy(q_order)], ql[q_order]
    if shard.g is None:
        return retrieval_metrics(q, ql, ks=shard.ks)
    return retrieval_metrics(q, ql, shard.g, shard.gl, ks=shard.ks, ref_includes_query=shard.ref_includes_query)


def _default_ids(sizes: list[int], rank: int) -> np.ndarray:
    start = sum(sizes[:rank])
    return np.arange(start, start + sizes[rank], dtype=np.int64)


def _gather_ids_labels(
    comm: _Group, ids: np.ndarray | None, labels: np.ndarray, sizes: list[int], float_labels: bool, name: str
) -> tuple[list[np.ndarray], np.ndarray]:
    """Every process's ids (its rows' positions) and the labels of the whole set in id order."""
    ids_given = ids is not None
    local_ids = ids if ids_given else _default_ids(sizes, comm.rank)
    dtype = torch.float64 if float_labels else torch.int64
    id_parts = (
        [p.numpy() for p in comm.gather(torch.from_numpy(local_ids), sizes)]
        if ids_given
        else [_default_ids(sizes, r) for r in range(comm.world)]
    )
    label_parts = comm.gather(torch.as_tensor(labels, dtype=dtype), sizes)
    n = sum(sizes)
    check_permutation(name, id_parts, n)
    all_labels = np.empty(n, dtype=np.float64 if float_labels else np.int64)
    for p_ids, p_labels in zip(id_parts, label_parts):
        all_labels[p_ids] = p_labels.numpy()
    return id_parts, all_labels


def _run(comm: _Group, shard: Shard, plan: Plan) -> dict[str, float]:
    q_ids_by_rank, ql_all = _gather_ids_labels(
        comm, shard.q_ids, shard.ql, plan.q_sizes, plan.float_labels, "query_ids"
    )
    if plan.self_search:
        g_ids_by_rank, gl_all = q_ids_by_rank, ql_all
        g_local = shard.q
        if shard.q_ids is not None and np.any(np.diff(shard.q_ids) < 0):  # the gallery goes round in id order
            order = np.argsort(shard.q_ids, kind="stable")
            g_local = shard.q[torch.from_numpy(order)]
            g_ids_by_rank = [np.sort(p) for p in q_ids_by_rank]
    else:
        g_ids_by_rank, gl_all = _gather_ids_labels(
            comm, shard.g_ids, shard.gl, plan.g_sizes, plan.float_labels, "reference_ids"
        )
        g_local = shard.g
    q_ids = q_ids_by_rank[comm.rank]
    n_q, n_g = plan.n_query, plan.n_gallery
    if plan.exclude and not plan.self_search:
        if n_g < n_q:
            raise ValueError(
                f"ref_includes_query needs the gallery's first {n_q} items to be the queries, but it "
                f"has {n_g}; put the queries first in the reference set, or do not exclude them"
            )
        if not np.array_equal(ql_all, gl_all[:n_q]):
            raise ValueError(
                "ref_includes_query=True needs the labels of reference ids 0..n_query-1 to equal the "
                "query labels (the queries must come first in the reference set)"
            )

    rel = relevance(ql_all, gl_all, plan.exclude)  # R_i and K as retrieval_metrics has them
    if not rel.active.any():
        return undefined_metrics(plan.ks, stacklevel=4)
    num_k = rel.neighbours_needed(plan.ks, n_g - int(plan.exclude))

    best_d, best_i = _search(comm, shard.q, q_ids, g_local, g_ids_by_rank, plan, num_k)

    # each local query's contribution, gathered in global order and summed as one process sums
    active, q_codes, g_codes = rel.active, rel.query_codes, rel.reference_codes
    local_active = active[q_ids]
    values = np.zeros((len(q_ids), len(metric_names(plan.ks))), dtype=np.float64)
    if local_active.any():
        match = g_codes[best_i.numpy()[local_active]] == q_codes[q_ids[local_active], None]
        values[local_active] = per_query_values(match, rel.counts[q_ids[local_active]], plan.ks)
    parts = comm.gather(torch.from_numpy(values), plan.q_sizes)
    all_values = np.empty((n_q, values.shape[1]), dtype=np.float64)
    for p_ids, part in zip(q_ids_by_rank, parts):
        all_values[p_ids] = part.numpy()
    sums = MetricSums(plan.ks)
    rows = max(1, _CHUNK_ELEMS // max(1, num_k))
    for a0 in range(0, n_q, rows):
        sel = np.flatnonzero(active[a0 : a0 + rows]) + a0
        sums.add_values(all_values[sel])
    return sums.result()


def _search(
    comm: _Group,
    q: torch.Tensor,
    q_ids: np.ndarray,
    g_local: torch.Tensor,
    g_ids_by_rank: list[np.ndarray],
    plan: Plan,
    num_k: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-``num_k`` (float64 squared distances, global gallery ids) of the local queries, ordered by
    (distance, id), against every gallery block of every process."""
    n_local = q.shape[0]
    best_d = torch.empty(n_local, 0, dtype=torch.float64)
    best_i = torch.empty(n_local, 0, dtype=torch.int64)
    source = EmbeddingSource(q, "query") if n_local else None
    own = torch.from_numpy(q_ids)[:, None]
    for s in range(comm.world):
        ids_s = torch.from_numpy(g_ids_by_rank[s])
        for b0 in range(0, plan.g_sizes[s], plan.block):
            b1 = min(plan.g_sizes[s], b0 + plan.block)
            mine = g_local[b0:b1] if comm.rank == s else None
            block = comm.broadcast(mine, (b1 - b0, plan.d), torch.float32, s)
            if source is None:
                continue
            kb = min(num_k + int(plan.exclude), b1 - b0)
            idx, d2 = exact_neighbours(
                source, EmbeddingSource(block, "reference"), kb, False, plan.tile_bytes, float64=True
            )
            gid = ids_s[b0:b1][idx]
            if plan.exclude:
                d2 = d2.masked_fill(gid == own, math.inf)
            d2, gid = rank_by_distance(torch.cat([best_d, d2], dim=1), torch.cat([best_i, gid], dim=1))
            best_d, best_i = d2[:, :num_k].contiguous(), gid[:, :num_k].contiguous()
    return best_d, best_i
