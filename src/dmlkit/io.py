"""Atomic file writes: a reader, or a process killed half-way, sees the old file or the new one, never half of one.

``atomic_write(path)`` opens a temporary file beside ``path`` (same folder, so the same file system),
hands it to the caller, and on a clean exit flushes it, ``fsync``s it and moves it onto ``path`` with
``os.replace``. If the block raises, the temporary file is removed and ``path`` is left as it was.
The temporary name (``.<name>.<pid>-<random>.tmp``) is fresh per call, so two processes writing the
same file at once both end with a complete one; it is created with the process's umask, like a
plain ``open``. ``write_text_atomic`` and ``write_json_atomic`` are the one-line cases.

A process killed inside the block (``kill -9``, power loss) leaves its temporary file behind;
``remove_stale_temporaries(folder)`` deletes those whose writer (the pid in the name) is gone, and
the writers of run folders and embedding jobs call it when they start.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from dmlkit.faults import fault_point

__all__ = ["atomic_write", "remove_stale_temporaries", "write_text_atomic", "write_json_atomic"]

#: ``.<name>.<pid>-<8 characters>.tmp``: the temporary files of ``atomic_write`` (and of the run folder's write test).
TEMPORARY_NAME = re.compile(r"^\.(?P<target>.+)\.(?P<pid>\d+)-[0-9a-z_]{8}\.tmp$")


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
            fault_point(f"write:{path.name}")
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


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_temporaries(folder: str | os.PathLike[str], targets: Iterable[str] | None = None) -> list[Path]:
    """Delete the temporary files that killed ``atomic_write`` calls left in ``folder``; return their paths.

    A temporary file counts as stale when the process named by the pid in its name no longer
    exists (so a write still in progress in another process is never touched). ``targets``
    limits the clean-up to temporaries of those file names (e.g. ``["embeddings.npy"]``).
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    wanted = None if targets is None else set(targets)
    removed = []
    for path in sorted(folder.iterdir()):
        match = TEMPORARY_NAME.match(path.name)
        if match is None or not path.is_file() or (wanted is not None and match["target"] not in wanted):
            continue
        if int(match["pid"]) != os.getpid() and not _process_alive(int(match["pid"])):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed
