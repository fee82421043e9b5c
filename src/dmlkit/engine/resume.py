"""Starting a run folder afresh or continuing it from ``last.pt``, and telling the user how to resume.

``open_run_folder`` locks the folder for a fresh start (config and environment written) or for a
continuation; ``record_resume`` appends a continuation to ``environment.json``, warning when the
environment changed; ``finished_summary`` answers ``--resume`` of a finished run. ``resume_command``,
``kept_checkpoint`` and ``peer_lost`` word what a stopped run tells the user.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

from dmlkit.engine.environment import check_resume, read_environment
from dmlkit.engine.peers import PeerProcessLost
from dmlkit.engine.run_folder import RunFolder
from dmlkit.io import write_json_atomic, write_text_atomic

__all__ = ["finished_summary", "kept_checkpoint", "open_run_folder", "peer_lost", "record_resume", "resume_command"]

Resume = tuple[dict[str, Any] | None, dict[str, list[Any]]]  # the recorded environment, what differs now


def open_run_folder(
    folder: RunFolder,
    environment: dict[str, Any],
    config_text: str,
    resuming: bool,
    is_global_zero: bool,
    records: dict[str, Any] | None = None,
) -> Resume | None:
    """Lock ``folder`` for a fresh start (returns None) or for a continuation from ``last.pt`` (returns the
    recorded environment and what differs from it now). Only rank 0 writes the folder; a fresh start writes
    ``records`` (``{file name: JSON content}``) beside the config."""
    records = records or {}
    if resuming and folder.last_checkpoint.is_file():
        folder.prepare_resume()
        saved = read_environment(folder.environment)
        differences = check_resume(saved, environment, folder.path) if saved is not None else {}
        if is_global_zero:
            folder.acquire()
            folder.remove_temporaries()
        return saved, differences
    if is_global_zero:
        folder.start_new(config_text, own_config=resuming, records=tuple(records))  # a resume without last.pt restarts
        write_text_atomic(folder.config, config_text)
        write_json_atomic(folder.environment, environment)
        for name, content in records.items():
            write_json_atomic(folder.path / name, content)
    return None


def record_resume(
    folder: RunFolder,
    saved: dict[str, Any] | None,
    differences: dict[str, list[Any]],
    environment: dict[str, Any],
    step: int,
) -> None:
    """Append this resume to ``environment.json`` (warning about a changed device, thread count or versions)."""
    if saved is None:  # a run folder of a dmlkit that recorded no environment
        return
    if differences:
        changed = "; ".join(f"{key}: {before} -> {now}" for key, (before, now) in differences.items())
        warnings.warn(
            f"resuming '{folder.path}' at step {step} in another environment ({changed}); the run continues, "
            "but its last digits may differ from an uninterrupted run",
            RuntimeWarning,
            stacklevel=3,
        )
    resumes = [*saved.get("resumes", []), {"step": step, **{k: environment[k] for k in differences}}]
    write_json_atomic(folder.environment, {**saved, "resumes": resumes})


def finished_summary(folder: RunFolder, is_global_zero: bool) -> dict[str, Any]:
    """``--resume`` of a finished run: its summary, with a warning (rank 0) that there is nothing to do."""
    summary = json.loads(folder.summary.read_text())
    if is_global_zero:
        warnings.warn(
            f"run folder '{folder.path}' holds a finished run ({summary.get('steps')} steps, summary.json); "
            f"--resume has nothing to do. Evaluate it with: dmlkit evaluate {folder.path}",
            RuntimeWarning,
            stacklevel=4,
        )
    return summary


def resume_command(folder: RunFolder, world_size: int) -> str:
    """The command that resumes the run in ``folder`` (with its number of processes)."""
    launcher = f"torchrun --nproc_per_node={world_size} -m dmlkit" if world_size > 1 else "dmlkit"
    return f"{launcher} train --resume {folder.path}"


def kept_checkpoint(folder: RunFolder) -> str:
    """Which checkpoint a stopped run keeps, as a clause of its error message."""
    last = folder.last_checkpoint
    if not last.is_file():
        return "no checkpoint was written yet"
    return f"the last finite checkpoint is kept in '{last}' (resume continues from it)"


def peer_lost(rank: int, step: int, folder: RunFolder, world_size: int) -> PeerProcessLost:
    """The error of a process whose collective failed because another process of the run went away."""
    return PeerProcessLost(
        f"rank {rank} stopped at step {step}: a collective with the run's "
        f"other processes failed, so one of them died or lost its connection (torchrun's report names the "
        f"rank and its exit code). Nothing more is written; {kept_checkpoint(folder)}. Resume with the same "
        f"number of processes: {resume_command(folder, world_size)}"
    )
