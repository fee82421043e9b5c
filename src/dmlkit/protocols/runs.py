"""Train one run of a protocol, or reuse it: a finished run is read back, an interrupted one resumed.

Protocols train many runs; a command stopped half-way picks up where it was
(runs with a ``summary.json`` are not trained again, runs with only ``last.pt`` resume).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dmlkit.config import ExperimentConfig, dump_config
from dmlkit.engine.run_folder import RunFolder


def train_or_reuse(cfg: ExperimentConfig, run_dir: Path, quiet: bool = True) -> dict[str, Any]:
    """The summary of the run of ``cfg`` in ``run_dir``, training (or resuming) it if needed.

    A folder holding a finished run of a *different* config is an error, so a
    changed config never silently reuses stale results.
    """
    from dmlkit.engine.trainer import Trainer

    folder = RunFolder(run_dir)
    if folder.config.is_file() and folder.config.read_text() != dump_config(cfg):
        raise ValueError(
            f"'{run_dir}' holds a run of another config; delete it or choose another --out folder"
        )
    if folder.summary.is_file():
        return json.loads(folder.summary.read_text())
    if folder.last_checkpoint.is_file():
        return Trainer.resume(run_dir, quiet=quiet).fit()
    if folder.path.exists() and any(folder.path.iterdir()):
        raise ValueError(f"'{run_dir}' holds an unfinished run with no checkpoint; delete it to start again")
    return Trainer(cfg, run_dir, quiet=quiet).fit()
