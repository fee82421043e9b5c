"""Embeddings stored on disk: a ``.npy`` file opened memory-mapped (never loaded whole), or an array in memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["open_embeddings"]


def open_embeddings(data: str | Path | np.ndarray, min_rows: int = 1) -> np.ndarray:
    """``data`` (a ``.npy`` path, opened with ``mmap_mode="r"``, or a numpy array / memmap) as an ``(n, d)`` array
    of real numbers with ``n >= min_rows``; anything else is a ``ValueError`` that says how to write the file."""
    if isinstance(data, (str, Path)):
        path = Path(data)
        if not path.is_file():
            raise ValueError(
                f"embeddings file '{path}' does not exist; save the embeddings with numpy.save(path, array)"
            )
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError as err:
            raise ValueError(f"'{path}' is not a .npy array of embeddings ({err}); write it with numpy.save") from err
    elif isinstance(data, np.ndarray):
        arr = data
    else:
        raise ValueError(f"pass the path of a .npy file or a numpy array / memmap; got {type(data).__name__}")
    if arr.ndim != 2 or arr.shape[0] < min_rows or arr.shape[1] < 1:
        raise ValueError(f"embeddings must have shape (n, d) with n >= {min_rows}; got {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"embeddings must hold real numbers; got dtype {arr.dtype}")
    return arr
