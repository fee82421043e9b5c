"""Pair runs only when they were fine-tuned from the same backbone weights, not merely the same backbone name.

A protocol pairs runs by config name and seed within one ``model.pretrained`` name (one ``--backbones`` entry).
The name does not fix the weights across machines: a GPU pretrains a recipe to other weights each time (cuDNN's
autotuner), and another torch gives another cache entry. Measured on an H200 (docs/results/font_testbed.md): the
same name and cache key, fine-tuned multi-similarity 1.5 MAP@R apart, larger than most method effects. A table
that pairs a method run on one machine with a baseline run on another would report the backbones' difference as
the method's. Each run records the weights it started from (``environment.json``'s ``pretrained``, written by the
trainer; ``assemble.pretrained.resolve_pretrained_weights``); ``check_same_weights`` refuses a table whose runs of one
name hold two sets. Run folders written before the record are not checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from dmlkit.protocols.run_records import first_runs, recorded_environment

__all__ = ["check_same_weights", "recorded_weights"]


def recorded_weights(run_dir: Path) -> tuple[str, str] | None:
    """``(name or file, checksum)`` of the pretrained weights the run in ``run_dir`` started from, or ``None`` when
    it records none (no pretrained backbone, or a folder written before dmlkit recorded it)."""
    record = (recorded_environment(run_dir) or {}).get("pretrained")
    if not isinstance(record, dict):
        return None
    if "name" in record:
        return str(record["name"]), str(record.get("checksum"))
    return str(record.get("file")), str(record.get("sha256"))


def check_same_weights(run_dirs: Iterable[Path]) -> None:
    """Raise ``ValueError`` when runs that name the same pretrained backbone started from different weights."""
    seen: dict[str, dict[str, list[str]]] = {}
    for run_dir in run_dirs:
        weights = recorded_weights(run_dir)
        if weights is not None:
            seen.setdefault(weights[0], {}).setdefault(weights[1], []).append(Path(run_dir).name)
    for name, by_checksum in seen.items():
        if len(by_checksum) > 1:
            sets = "; ".join(f"{checksum[:12]} in {first_runs(runs)}" for checksum, runs in sorted(by_checksum.items()))
            raise ValueError(
                f"the runs of this table fine-tuned from pretrained backbone '{name}' started from {len(by_checksum)} "
                f"different sets of its weights ({sets}): they were pretrained on different machines (or on a GPU, "
                "which does not repeat a pretraining), so pairing them would count the backbones' difference as the "
                "method's. Keep each machine's runs under their own --out, or train the runs of one set again here"
            )
