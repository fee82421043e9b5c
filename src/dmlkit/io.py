"""Atomic file writes: a reader, or a process killed half-way, sees the old file or the new one, never half of one.

``atomic_write(path)`` opens a temporary file beside ``path`` (same folder, so the same file system),
hands it to the caller, and on a clean exit flushes it, ``fsync``s it and moves it onto ``path`` with
``os.replace``. If the block raises, the temporary file is removed and ``path`` is left as it was.
The temporary name (``.<name>.<pid>-<random>.tmp``) is fresh per call, so two processes writing the
same file at once both end with a complete one; it is created with the process's umask, like a
plain ``open``. ``write_text_atomic`` and ``write_json_atomic`` are the one-line cases.
"""

from __future__ import annotations

import json
import os
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

__all__ = ["atomic_write", "write_text_atomic", "write_json_atomic"]


@contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO[Any]]:
    """Write ``path`` atomically through the file object this yields (``mode`` ``"wb"`` or ``"w"``).

    The parent folder must exist. The yielded file's ``name`` is the temporary path, for writers
    that insist on a file name (its data is still ``fsync``ed through this handle, which shares the inode).
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_write mode must be 'wb' or 'w', got {mode!r}")
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    fh = open(tmp, mode.replace("w", "x"))  # exclusive create: never another writer's temporary file
    try:
        with fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path`` with ``text`` atomically."""
    with atomic_write(path, "w") as fh:
        fh.write(text)


def write_json_atomic(path: str | os.PathLike[str], values: dict[str, Any]) -> None:
    """Replace ``path`` with ``values`` as indented JSON (and a final newline) atomically."""
    write_text_atomic(path, json.dumps(values, indent=2) + "\n")
