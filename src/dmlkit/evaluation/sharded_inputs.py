"""Sharded evaluation's inputs: one process's shard checked locally, and the plan every process agrees on.

Each process checks its own shard first (:class:`Shard`), so no process raises while the others wait in a
collective; the processes then exchange the shards' summaries, and :class:`Plan` derives from them what every
process must agree on (sizes, dimension, ``ks``, gallery block size), the same on every process.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from dmlkit.evaluation.knn import DEFAULT_MAX_BLOCK_BYTES
from dmlkit.evaluation.retrieval import check_ks, check_labels
from dmlkit.validation import is_real

__all__ = ["MIN_BLOCK_ROWS"]  # Shard, Plan and check_permutation serve sharded.py only

#: The smallest gallery block a budget must hold.
MIN_BLOCK_ROWS = 64


def _float_matrix(x: Any, name: str) -> torch.Tensor:
    """``x`` as a float32 CPU ``(n, d)`` tensor (``n`` may be 0), checked finite."""
    t = x.detach() if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    if t.dim() != 2 or t.shape[1] == 0:
        raise ValueError(
            f"{name} must be 2-D with shape (n, d), d >= 1; got shape {tuple(t.shape)}. "
            "Pass a (0, d) tensor for an empty shard."
        )
    if t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{name} must hold real numbers; got dtype {t.dtype}")
    t = t.to(device="cpu", dtype=torch.float32).contiguous()
    finite = torch.isfinite(t).all(dim=1)
    if not bool(finite.all()):
        rows = torch.nonzero(~finite).flatten()[:5].tolist()
        raise ValueError(
            f"{name} has rows with NaN or infinite values (local rows {rows}"
            f"{' and more' if int((~finite).sum()) > 5 else ''}); check the model output "
            "(e.g. a diverged loss) or drop those rows before evaluating."
        )
    return t


def _labels(x: Any, name: str, n: int, emb_name: str) -> np.ndarray:
    arr = check_labels(x, name, n, emb_name)
    return arr.astype(np.float64) if arr.dtype.kind == "f" else arr.astype(np.int64)


def _ids(x: Any, name: str, n: int) -> np.ndarray | None:
    if x is None:
        return None
    arr = np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x)
    if arr.ndim != 1 or len(arr) != n:
        raise ValueError(f"{name} must hold one id per local row ({n}); got shape {arr.shape}")
    if n and arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must be integer positions in the whole set; got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if n and (arr.min() < 0 or len(np.unique(arr)) != n):
        raise ValueError(
            f"{name} must be distinct non-negative positions in the whole set (e.g. dmlkit.distributed.shard_indices)"
        )
    return arr


class Shard:
    """One process's checked inputs (gallery sorted by id when ids are given)."""

    def __init__(
        self,
        query: Any,
        query_labels: Any,
        reference: Any,
        reference_labels: Any,
        ks: Sequence[int],
        query_ids: Any,
        reference_ids: Any,
        ref_includes_query: bool,
        budget_mb: float,
    ) -> None:
        self.ks = check_ks(ks)
        if not is_real(budget_mb) or not budget_mb > 0:
            raise ValueError(f"budget_mb must be a positive number of megabytes; got {budget_mb!r}")
        self.budget_mb = float(budget_mb)
        self.q = _float_matrix(query, "query")
        self.ql = _labels(query_labels, "query_labels", self.q.shape[0], "query")
        self.q_ids = _ids(query_ids, "query_ids", self.q.shape[0])
        self.ref_includes_query = bool(ref_includes_query)
        if reference is None:
            if reference_labels is not None or reference_ids is not None:
                raise ValueError(
                    "reference_labels / reference_ids were given without reference; pass all of them, "
                    "or none to use the query shards as the gallery"
                )
            if self.ref_includes_query:
                raise ValueError("ref_includes_query needs a reference; without one each query is excluded anyway")
            self.g = self.gl = self.g_ids = None
            return
        self.g = _float_matrix(reference, "reference")
        self.gl = _labels(reference_labels, "reference_labels", self.g.shape[0], "reference")
        self.g_ids = _ids(reference_ids, "reference_ids", self.g.shape[0])
        if self.g_ids is not None and np.any(np.diff(self.g_ids) < 0):  # blocks in id order: ties as one process
            order = np.argsort(self.g_ids, kind="stable")
            self.g, self.gl, self.g_ids = self.g[torch.from_numpy(order)], self.gl[order], self.g_ids[order]

    def summary(self) -> dict[str, Any]:
        return {
            "n_query": self.q.shape[0],
            "d_query": self.q.shape[1],
            "n_gallery": None if self.g is None else self.g.shape[0],
            "d_gallery": None if self.g is None else self.g.shape[1],
            "query_ids": self.q_ids is not None,
            "reference_ids": self.g_ids is not None,
            "float_labels": any(len(a) and a.dtype.kind == "f" for a in (self.ql, self.gl) if a is not None),
            "ks": self.ks,
            "ref_includes_query": self.ref_includes_query,
            "budget_mb": self.budget_mb,
        }


class Plan:
    """What every process agrees on from the exchanged summaries (same outcome on every process)."""

    def __init__(self, summaries: list[dict[str, Any]]) -> None:
        first = summaries[0]
        for key in ("ks", "ref_includes_query", "budget_mb", "query_ids", "reference_ids"):
            values = [s[key] for s in summaries]
            if any(v != values[0] for v in values):
                raise ValueError(f"every process must pass the same {key}; got {values} by rank")
        self_search = [s["n_gallery"] is None for s in summaries]
        if any(self_search) and not all(self_search):
            raise ValueError(
                "some processes passed a reference shard and others did not; pass one on every "
                "process (an empty (0, d) one where a process holds none), or on none"
            )
        self.self_search = self_search[0]
        self.q_sizes = [s["n_query"] for s in summaries]
        self.g_sizes = self.q_sizes if self.self_search else [s["n_gallery"] for s in summaries]
        self.n_query, self.n_gallery = sum(self.q_sizes), sum(self.g_sizes)
        dims = [("query", r, s["d_query"]) for r, s in enumerate(summaries)]
        if not self.self_search:
            dims += [("gallery", r, s["d_gallery"]) for r, s in enumerate(summaries)]
        for kind, r, d in dims:
            if d != dims[0][2]:
                raise ValueError(
                    f"the {dims[0][0]} shard of rank {dims[0][1]} has dimension {dims[0][2]} but the "
                    f"{kind} shard of rank {r} has dimension {d}; embed every shard with the same model"
                )
        self.d = dims[0][2]
        if self.n_query == 0 or self.n_gallery == 0:
            raise ValueError(
                f"the shards hold {self.n_query} queries and {self.n_gallery} gallery items in all; "
                "at least one of each is needed"
            )
        self.ks = first["ks"]
        self.exclude = self.self_search or first["ref_includes_query"]
        self.ids_given = (first["query_ids"], first["reference_ids"] if not self.self_search else first["query_ids"])
        self.float_labels = any(s["float_labels"] for s in summaries)
        budget = int(first["budget_mb"] * 2**20)
        self.tile_bytes = min(DEFAULT_MAX_BLOCK_BYTES, budget // 4)
        per_row = 4 * self.d + 4 * (self.d + 2)
        self.block = (budget - self.tile_bytes) // per_row
        if self.block < MIN_BLOCK_ROWS:
            need = math.ceil((MIN_BLOCK_ROWS * per_row + min(DEFAULT_MAX_BLOCK_BYTES, budget)) / 2**20 * 4 / 3)
            raise ValueError(
                f"budget_mb={first['budget_mb']:g} is too small for one gallery block of "
                f"{MIN_BLOCK_ROWS} rows of dimension {self.d} plus the score tiles; raise budget_mb "
                f"to at least {max(need, 1)}"
            )


def check_permutation(name: str, parts: list[np.ndarray], n: int) -> None:
    ids = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if len(ids) != n or (n and (ids.min() < 0 or ids.max() >= n or len(np.unique(ids)) != n)):
        raise ValueError(
            f"the {name} of all processes must be 0 .. {n - 1}, each once (e.g. "
            "dmlkit.distributed.shard_indices of the dataset); they are not"
        )
