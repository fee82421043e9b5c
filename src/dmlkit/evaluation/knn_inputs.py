"""The embeddings an exact k-NN search reads, and the checks of its arguments.

:class:`EmbeddingSource` wraps an ``(n, d)`` matrix of real numbers (torch
tensor, numpy array or numpy memmap) and hands it out as float32 row blocks.
An in-memory matrix is converted to float32 once and checked finite once; a
memmap is never loaded whole: each block is read, converted and checked when
it is asked for.

The ``check_*`` functions turn bad arguments of :func:`dmlkit.evaluation.knn_search`
(and of the retrieval metrics built on it) into ``ValueError``s that say how to
fix them. This module is a part of ``knn_search``, not an API of its own.
"""

from __future__ import annotations

import numpy as np
import torch
from dmlkit.validation import is_int


class EmbeddingSource:
    """A 2-D float matrix read in float32 row blocks (tensor, ndarray or memmap).

    ``n`` rows of dimension ``d``; ``streamed`` is true for a numpy memmap,
    whose rows are read (and checked finite) block by block.
    """

    def __init__(self, x: object, name: str) -> None:
        self.name = name
        data = _as_matrix(x, name)
        _check_matrix(data, name)
        self.n, self.d = int(data.shape[0]), int(data.shape[1])
        self.streamed = isinstance(data, np.memmap)
        self._data = data if self.streamed else _float32_in_memory(data, name)

    def rows(self, start: int, stop: int) -> torch.Tensor:
        """Rows ``start:stop`` as a float32 tensor (checked finite when streamed)."""
        if not self.streamed:
            return self._data[start:stop]
        block = torch.from_numpy(np.array(self._data[start:stop], dtype=np.float32))
        if not bool(torch.isfinite(block).all()):
            raise _non_finite(self.name)
        return block

    def rows_at(self, index: torch.Tensor) -> torch.Tensor:
        """Rows at ``index`` as a float32 tensor (sorted unique ``index`` when streamed)."""
        if not self.streamed:
            return self._data[index]
        block = np.asarray(self._data[index.numpy()], dtype=np.float32)
        return torch.from_numpy(block)


def _as_matrix(x: object, name: str) -> torch.Tensor | np.ndarray:
    """``x`` as a tensor (detached) or numpy array, without copying either."""
    if isinstance(x, torch.Tensor):
        return x.detach()
    if isinstance(x, np.ndarray):
        return x
    try:
        return np.asarray(x)
    except Exception as exc:  # pragma: no cover - exotic inputs
        raise ValueError(
            f"{name} must be a torch.Tensor or numpy array of shape (n, d); got {type(x).__name__}"
        ) from exc


def _check_matrix(data: torch.Tensor | np.ndarray, name: str) -> None:
    """A non-empty 2-D matrix of real numbers (integers accepted)."""
    if data.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D with shape (n, d); got shape {tuple(data.shape)}. "
            "Reshape it, e.g. x.reshape(len(x), -1)."
        )
    if data.shape[0] == 0 or data.shape[1] == 0:
        raise ValueError(
            f"{name} is empty (shape {tuple(data.shape)}); pass at least one embedding with at least one dimension."
        )
    if isinstance(data, torch.Tensor):
        real = not data.is_complex() and (data.is_floating_point() or _is_int(data.dtype))
    else:
        real = np.issubdtype(data.dtype, np.floating) or np.issubdtype(data.dtype, np.integer)
    if not real:
        raise ValueError(f"{name} must hold real numbers; got dtype {data.dtype}")


def _float32_in_memory(data: torch.Tensor | np.ndarray, name: str) -> torch.Tensor:
    """A contiguous float32 CPU copy of ``data``, checked finite."""
    t = torch.as_tensor(data).to(device="cpu", dtype=torch.float32)
    if not bool(torch.isfinite(t).all()):
        raise _non_finite(name)
    return t.contiguous()


def _is_int(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def _non_finite(name: str) -> ValueError:
    return ValueError(
        f"{name} contains NaN or infinite values; check the model output "
        "(e.g. a diverged loss) or drop those rows before evaluating."
    )


def check_k(k: object, n_reference: int, exclude_self: bool) -> int:
    """``k`` as an int between 1 and the number of candidate references."""
    if not is_int(k, numpy=True):
        raise ValueError(f"k must be a positive integer; got {k!r}")
    available = n_reference - int(exclude_self)
    if k < 1 or k > available:
        raise ValueError(
            f"k must be between 1 and {available} (the number of candidate references"
            f"{' once each query itself is excluded' if exclude_self else ''}); got {k}"
        )
    return int(k)


def check_block_bytes(max_block_bytes: object) -> int:
    """``max_block_bytes`` as a positive int."""
    if isinstance(max_block_bytes, bool) or not isinstance(max_block_bytes, (int, np.integer)) or max_block_bytes <= 0:
        raise ValueError(f"max_block_bytes must be a positive integer; got {max_block_bytes!r}")
    return int(max_block_bytes)


def check_pair(query: EmbeddingSource, reference: EmbeddingSource, exclude_self: bool) -> None:
    """Same dimension; with ``exclude_self``, at least as many references as queries."""
    if reference.d != query.d:
        raise ValueError(
            f"query and reference have different dimensions ({query.d} vs {reference.d}); "
            "embed both sets with the same model."
        )
    if exclude_self and reference.n < query.n:
        raise ValueError(
            f"excluding each query from its own neighbours needs reference[i] to be "
            f"query[i], but reference has {reference.n} rows and query has {query.n}. Put the "
            "queries first in the reference set, or do not exclude them."
        )
