"""The run's ``metrics.jsonl``: one JSON record per logged event, appended and flushed.

A process killed in the middle of an append leaves a torn last line; ``read`` drops it with a
warning naming the file and the line (resume then rewrites the log without it). A line that is
not JSON anywhere else means the file was damaged otherwise: a ``ValueError`` names it.
"""

from __future__ import annotations

import json
import warnings
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
        lines = [(number, line) for number, line in enumerate(self.path.read_text().splitlines(), 1) if line.strip()]
        records = []
        for position, (number, line) in enumerate(lines):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:
                if position < len(lines) - 1:
                    raise ValueError(
                        f"'{self.path}' line {number} is not JSON ({err}); the log is damaged: "
                        "repair or delete that line, then resume"
                    ) from err
                warnings.warn(
                    f"'{self.path}' line {number} is torn (a write was cut off: {err}); dropping that line",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return records

    def truncate_after(self, step: int) -> None:
        """Drop records after ``step`` (used on resume so the log reads as one uninterrupted run)."""
        kept = [r for r in self.read() if r.get("step", 0) <= step]
        if not self.write:
            return
        with atomic_write(self.path, "w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in kept)
