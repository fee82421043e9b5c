"""The run's ``metrics.jsonl``: one JSON record per logged event, appended and flushed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dmlkit.io import atomic_write


class MetricsLog:
    """Append-only log of training and validation records, each carrying its ``step``.

    ``write=False`` (processes other than rank 0 of a multi-process run) reads the file but never changes it.
    """

    def __init__(self, path: str | Path, write: bool = True) -> None:
        self.path = Path(path)
        self.write = write

    def append(self, record: dict[str, Any]) -> None:
        if not self.write:
            return
        with open(self.path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with open(self.path) as fh:
            return [json.loads(line) for line in fh if line.strip()]

    def truncate_after(self, step: int) -> None:
        """Drop records after ``step`` (used on resume so the log reads as one uninterrupted run)."""
        kept = [r for r in self.read() if r.get("step", 0) <= step]
        if not self.write:
            return
        with atomic_write(self.path, "w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in kept)
