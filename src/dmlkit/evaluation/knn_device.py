"""Exact k-nearest neighbours of embeddings that live on one device (a GPU): :func:`device_knn_search`.

The CPU search (:func:`dmlkit.evaluation.knn_search`) reads its inputs into host memory and runs
small tiles on worker threads. When the embeddings already sit on a GPU, copying them back to search
them there wastes the device; this search keeps every step on the inputs' device, in blocks whose
float32 score tiles stay within ``max_block_bytes``:

1. Candidates: the float32 expansion ``-|q - r|^2 / 2 = [y, -|y|^2/2, 1] . [z, 1, -|z|^2/2]`` of
   the vectors centred on the reference mean (``y = q - m``, ``z = r - m``), one matrix product per
   tile with TF32 off, reduced into a running top-``k'`` per query, ``k' = k + max(4, k // 4)``.
2. Exact re-ranking: the candidates' squared distances recomputed by direct differences in float64,
   nearest first, exact ties to the smaller reference index.
3. Certificate: the same float64 bound on the rounding of the float32 expansion as the CPU search
   (``delta = 5 gamma_{d+2} (|q - m|^2 + max |r - m|^2)``, :mod:`~dmlkit.evaluation.knn_certificate`);
   the queries it does not cover are searched again by float64 direct differences over all references.

So the result is the CPU search's, neighbour for neighbour (same exactness, same tie rule), on any
device; the tests check that on the CPU, and ``scripts/device_check.sh`` on a GPU.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from dmlkit.evaluation.knn import KNNResult
from dmlkit.evaluation.knn_certificate import _gamma, candidate_count, rank_by_distance
from dmlkit.evaluation.knn_inputs import check_block_bytes, check_k, check_pair

__all__ = ["DEVICE_BLOCK_BYTES", "device_knn_search"]

#: Default bound on the bytes of one float32 score tile (256 MiB: a 4096 x 16384 tile).
DEVICE_BLOCK_BYTES = 256 * 2**20

_NEG_INF = float("-inf")


def device_knn_search(
    query: torch.Tensor,
    k: int,
    reference: torch.Tensor | None = None,
    *,
    exclude_self: bool | None = None,
    max_block_bytes: int = DEVICE_BLOCK_BYTES,
    squared: bool = False,
) -> KNNResult:
    """Exact ``k`` nearest references of every query, computed on the inputs' device.

    Same arguments and result as :func:`dmlkit.evaluation.knn_search` (``exclude_self`` defaults to
    ``reference is None``), for tensors on one device; the result stays on that device.

    Raises:
        ValueError: inputs not tensors on one device, not 2-D, empty, non-finite, of different
            dimensions, or an impossible ``k``.
    """
    q = DeviceEmbeddings(query, "query")
    r = None if reference is None else DeviceEmbeddings(reference, "reference")
    if exclude_self is None:
        exclude_self = reference is None
    if r is not None:
        check_same_device(q, r)
        check_pair(q, r, bool(exclude_self))  # type: ignore[arg-type]
    k = check_k(k, (q if r is None else r).n, bool(exclude_self))
    idx, d2 = device_neighbours(q, r, k, bool(exclude_self), check_block_bytes(max_block_bytes))
    dist = d2.float()
    return KNNResult(dist if squared else dist.sqrt(), idx)


def device_neighbours(
    q: DeviceEmbeddings,
    r: DeviceEmbeddings | None,
    k: int,
    exclude_self: bool,
    max_block_bytes: int = DEVICE_BLOCK_BYTES,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(indices, float64 squared distances)``, both ``(n_query, k)``, nearest first, of checked
    embeddings on one device (``r`` ``None``: the queries against themselves); the counterpart of
    :func:`dmlkit.evaluation.knn.exact_neighbours`."""
    query = q.data.float()  # exact for the float32 inputs, as the CPU search
    ref = query if r is None else r.data.float()
    available = ref.shape[0] - int(exclude_self)
    kc = candidate_count(k, available)
    with torch.no_grad(), _exact_float32_products():
        shift = ref.double().mean(dim=0)
        left, right = _augmented(query, shift, left=True), _augmented(ref, shift, left=False)
        scores, cand = _collect(left, right, kc, exclude_self, max_block_bytes)
        d2, idx = _rerank(query, ref, cand, k)
        if kc < available:
            failed = _uncertified(query, ref, shift, scores[:, -1], d2[:, -1])
            if failed.numel():
                cand = _float64_candidates(query, ref, shift, failed, kc, exclude_self, max_block_bytes)
                d2[failed], idx[failed] = _rerank(query[failed], ref, cand, k)
    return idx, d2


@contextmanager
def _exact_float32_products() -> Iterator[None]:
    """TF32 off for the products (its 10-bit mantissa would void the float32 rounding bound)."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def _augmented(x: torch.Tensor, shift: torch.Tensor, left: bool) -> torch.Tensor:
    """``[y, -|y|^2/2, 1]`` (left) or ``[y, 1, -|y|^2/2]`` (right), ``y = x - shift`` in float32."""
    y = (x.double() - shift).float()
    half_sq = y.pow(2).sum(dim=1, keepdim=True).mul_(-0.5)
    one = torch.ones_like(half_sq)
    return torch.cat([y, half_sq, one] if left else [y, one, half_sq], dim=1)


def _collect(
    left: torch.Tensor,
    right: torch.Tensor,
    kc: int,
    exclude_self: bool,
    max_block_bytes: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``kc`` best float32 scores of each query and their reference indices, best first."""
    nq, nr = left.shape[0], right.shape[0]
    cols = max(kc, min(nr, max_block_bytes // 4 // max(1, min(nq, 4096))))
    rows = max(1, min(nq, max_block_bytes // 4 // cols))
    best_s = torch.empty(nq, kc, dtype=torch.float32, device=left.device)
    best_i = torch.empty(nq, kc, dtype=torch.int64, device=left.device)
    for a0 in range(0, nq, rows):
        a1 = min(nq, a0 + rows)
        run_s = torch.full((a1 - a0, 0), _NEG_INF, device=left.device)
        run_i = torch.empty((a1 - a0, 0), dtype=torch.int64, device=left.device)
        for b0 in range(0, nr, cols):
            b1 = min(nr, b0 + cols)
            tile = left[a0:a1] @ right[b0:b1].T
            if exclude_self:
                _mask_own(tile, a0, a1, b0, b1)
            s, i = tile.topk(min(kc, b1 - b0), dim=1)
            run_s, pick = torch.cat([run_s, s], dim=1).topk(min(kc, run_s.shape[1] + s.shape[1]), dim=1)
            run_i = torch.cat([run_i, i + b0], dim=1).gather(1, pick)
        best_s[a0:a1], best_i[a0:a1] = run_s[:, :kc], run_i[:, :kc]
    return best_s, best_i


def _mask_own(tile: torch.Tensor, a0: int, a1: int, b0: int, b1: int) -> None:
    """Score ``-inf`` for query ``i`` against reference ``i`` inside the tile ``[a0:a1, b0:b1]``."""
    lo, hi = max(a0, b0), min(a1, b1)
    if lo < hi:
        own = torch.arange(lo, hi, device=tile.device)
        tile[own - a0, own - b0] = _NEG_INF


def _rerank(query: torch.Tensor, ref: torch.Tensor, cand: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The best ``k`` candidates by float64 direct differences, ties to the smaller index."""
    chunk = max(1, (64 * 2**20) // max(1, 8 * cand.shape[1] * query.shape[1]))
    d2 = torch.empty(cand.shape, dtype=torch.float64, device=cand.device)
    for a0 in range(0, cand.shape[0], chunk):
        a1 = min(cand.shape[0], a0 + chunk)
        diff = ref[cand[a0:a1]].double() - query[a0:a1].double().unsqueeze(1)
        d2[a0:a1] = diff.pow_(2).sum(dim=2)
    d2, idx = rank_by_distance(d2, cand)
    return d2[:, :k].contiguous(), idx[:, :k].contiguous()


def _uncertified(
    query: torch.Tensor,
    ref: torch.Tensor,
    shift: torch.Tensor,
    worst_score: torch.Tensor,
    kth: torch.Tensor,
) -> torch.Tensor:
    """Rows whose ``k`` kept neighbours the float32 rounding bound does not prove exact."""
    gamma = _gamma(query.shape[1] + 2)  # the CPU search's bound, for the same d + 2 term expansion
    qn = (query.double() - shift).pow(2).sum(dim=1)
    rn_max = (ref.double() - shift).pow(2).sum(dim=1).max()
    delta = 5.0 * gamma * (qn + rn_max)
    return torch.nonzero(worst_score.double() * -2.0 - delta <= kth * (1.0 + 1e-12)).flatten()


def _float64_candidates(
    query: torch.Tensor,
    ref: torch.Tensor,
    shift: torch.Tensor,
    rows: torch.Tensor,
    k: int,
    exclude_self: bool,
    max_block_bytes: int,
) -> torch.Tensor:
    """Indices of the ``k`` nearest references of query ``rows`` by float64 direct differences over every
    reference (centred, so their order may differ from the re-ranking's in the last bits: re-rank them)."""
    qx = query[rows].double() - shift
    cols = max(1, max_block_bytes // 8 // max(1, len(rows)))
    best_d = torch.empty(len(rows), 0, dtype=torch.float64, device=query.device)
    best_i = torch.empty(len(rows), 0, dtype=torch.int64, device=query.device)
    for b0 in range(0, ref.shape[0], cols):
        b1 = min(ref.shape[0], b0 + cols)
        d = torch.cdist(qx, ref[b0:b1].double() - shift, compute_mode="donot_use_mm_for_euclid_dist").pow_(2)
        if exclude_self:
            own = (rows >= b0) & (rows < b1)
            d[own.nonzero().flatten(), rows[own] - b0] = float("inf")
        ids = torch.arange(b0, b1, device=query.device).expand(len(rows), -1)
        best_d, best_i = rank_by_distance(torch.cat([best_d, d], dim=1), torch.cat([best_i, ids], dim=1))
        best_d, best_i = best_d[:, :k], best_i[:, :k]
    return best_i


class DeviceEmbeddings:
    """A checked ``(n, d)`` tensor of real numbers kept on its device (the GPU counterpart of
    :class:`~dmlkit.evaluation.knn_inputs.EmbeddingSource`): ``n`` rows of dimension ``d``."""

    def __init__(self, x: object, name: str) -> None:
        if not isinstance(x, torch.Tensor):
            raise ValueError(
                f"{name} must be a torch.Tensor on the device to search on; got {type(x).__name__}. "
                "Use dmlkit.evaluation.knn_search for numpy arrays and memmaps."
            )
        if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
            raise ValueError(f"{name} must be a non-empty 2-D (n, d) tensor; got shape {tuple(x.shape)}")
        if x.is_complex() or x.dtype == torch.bool:
            raise ValueError(f"{name} must hold real numbers; got dtype {x.dtype}")
        if x.is_floating_point() and not bool(torch.isfinite(x).all()):
            raise ValueError(
                f"{name} contains NaN or infinite values; check the model output "
                "(e.g. a diverged loss) or drop those rows before evaluating."
            )
        self.name, self.data = name, x.detach()
        self.n, self.d = int(x.shape[0]), int(x.shape[1])


def on_accelerator(x: object) -> bool:
    """Whether ``x`` is a tensor on a device other than the CPU (searched there, not copied back)."""
    return isinstance(x, torch.Tensor) and x.device.type != "cpu"


def check_same_device(q: DeviceEmbeddings, r: DeviceEmbeddings) -> None:
    """Query and reference on one device (a search does not move either)."""
    if r.data.device != q.data.device:
        raise ValueError(
            f"query is on {q.data.device} and reference on {r.data.device}; "
            "move both to one device (e.g. reference.to(query.device))."
        )
