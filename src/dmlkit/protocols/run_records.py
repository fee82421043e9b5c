"""What the pairing checks read of a finished run folder, and how their errors list runs.

A protocol's checks (``backbone_weights``, ``run_machines``) read the environment the trainer recorded
(``environment.json``). A folder without one, or with a damaged one, is not checked: it was written before dmlkit
recorded it, or a resume reports the damage (``engine.environment.read_environment``) where it matters.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["first_runs", "recorded_environment"]


def recorded_environment(run_dir: Path) -> dict[str, Any] | None:
    """The environment the run in ``run_dir`` recorded, or ``None`` when it records none that can be read."""
    path = Path(run_dir) / "environment.json"
    if not path.is_file():
        return None
    try:
        environment = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    return environment if isinstance(environment, dict) else None


def first_runs(runs: list[str], shown: int = 4) -> str:
    """The first ``shown`` run names in order, then ``...`` when there are more: an error's list of the runs of a
    group."""
    return ", ".join(sorted(runs)[:shown]) + (" ..." if len(runs) > shown else "")
