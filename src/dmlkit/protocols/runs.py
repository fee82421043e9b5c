"""Obtain the runs of a protocol: train them, reuse finished ones, or only plan them for parallel workers.

Protocols train many runs; a command stopped half-way picks up where it was
(runs with a ``summary.json`` are not trained again, runs with only ``last.pt``
resume). ``--jobs N`` first *plans* every run, trains them in ``N`` worker
processes, then aggregates; ``--reuse-only`` aggregates the finished runs alone.
"""

from __future__ import annotations

import json
import multiprocessing
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from functools import partial
from typing import Any, Callable, Optional, TypeVar

from dmlkit.config import ExperimentConfig, dump_config, load_config
from dmlkit.engine.run_folder import RunFolder

Summary = Optional[dict[str, Any]]
Obtain = Callable[[ExperimentConfig, Path], Summary]
T = TypeVar("T")


def _check_same_config(cfg: ExperimentConfig, folder: RunFolder) -> None:
    """The run in ``folder`` must be of ``cfg``; compared after loading, so keys added later with their defaults match."""
    if folder.config.is_file() and dump_config(load_config(folder.config)) != dump_config(cfg):
        raise ValueError(f"'{folder.path}' holds a run of another config; delete it or choose another --out folder")


def train_or_reuse(cfg: ExperimentConfig, run_dir: Path, quiet: bool = True) -> dict[str, Any]:
    """The summary of the run of ``cfg`` in ``run_dir``, training (or resuming) it if needed.

    A folder holding a run of a *different* config is an error, so a changed
    config never silently reuses stale results.
    """
    from dmlkit.engine.trainer import Trainer

    folder = RunFolder(run_dir)
    _check_same_config(cfg, folder)
    if folder.summary.is_file():
        return json.loads(folder.summary.read_text())
    if folder.last_checkpoint.is_file():
        return Trainer.resume(run_dir, quiet=quiet).fit()
    if folder.path.exists() and any(folder.path.iterdir()):
        raise ValueError(f"'{run_dir}' holds an unfinished run with no checkpoint; delete it to start again")
    return Trainer(cfg, run_dir, quiet=quiet).fit()


def reuse_only(cfg: ExperimentConfig, run_dir: Path) -> Summary:
    """The finished run's summary, or None when it has not finished."""
    folder = RunFolder(run_dir)
    _check_same_config(cfg, folder)
    return json.loads(folder.summary.read_text()) if folder.summary.is_file() else None


class Planner:
    """An ``Obtain`` that only records which runs are needed (their config text and folder)."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, Path]] = []

    def __call__(self, cfg: ExperimentConfig, run_dir: Path) -> Summary:
        folder = RunFolder(run_dir)
        _check_same_config(cfg, folder)
        if not folder.summary.is_file():
            self.runs.append((dump_config(cfg), run_dir))
        return None


def _train_from_text(config_text: str, run_dir: str) -> str:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        fh.write(config_text)
    try:
        train_or_reuse(load_config(fh.name), Path(run_dir))
    except Exception:  # reported by the parent, the other runs go on
        return traceback.format_exc()
    finally:
        Path(fh.name).unlink(missing_ok=True)
    return ""


def train_in_parallel(runs: list[tuple[str, Path]], jobs: int) -> list[str]:
    """Train ``runs`` in ``jobs`` spawned processes; return the error reports of the runs that failed."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an int >= 1, got {jobs!r}")
    errors = []
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {pool.submit(_train_from_text, text, str(run_dir)): run_dir for text, run_dir in runs}
        for future in as_completed(futures):
            report = future.result()
            if report:
                errors.append(f"{futures[future]}:\n{report}")
    return errors


def gather_runs(collect: Callable[[Obtain], T], jobs: int = 1, reuse: bool = False, quiet: bool = True) -> tuple[T, list[str]]:
    """``collect(obtain)`` with the runs it needs trained first: the shared flow of protocol tables and sweeps.

    ``jobs > 1`` plans the missing runs (``collect`` with a ``Planner``) and trains
    them in that many processes; ``reuse=True`` trains nothing. Returns what
    ``collect`` returns and the error reports of the runs that failed (the
    others are then reported from what finished).
    """
    errors: list[str] = []
    if jobs != 1 and not reuse:
        planner = Planner()
        collect(planner)
        errors = train_in_parallel(planner.runs, jobs)
    obtain: Obtain = reuse_only if reuse or errors else partial(train_or_reuse, quiet=quiet)
    return collect(obtain), errors
