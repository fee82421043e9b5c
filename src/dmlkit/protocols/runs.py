"""Obtain the runs of a protocol: train them, reuse finished ones, or only plan them for parallel workers.

Protocols train many runs; a command stopped half-way picks up where it was
(runs with a ``summary.json`` are not trained again, runs with only ``last.pt``
resume). ``--jobs N`` first *plans* every run, trains them in ``N`` worker
processes, then aggregates; ``--reuse-only`` aggregates the finished runs alone.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import traceback
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from functools import partial
from typing import Any, Callable, Optional, Sequence, TypeVar

from dmlkit.config import ExperimentConfig, config_differences, dump_config, load_config
from dmlkit.engine.run_folder import RunFolder
from dmlkit.interrupts import RunsInterrupted
from dmlkit.validation import is_int

Summary = Optional[dict[str, Any]]
Obtain = Callable[[ExperimentConfig, Path], Summary]
T = TypeVar("T")


def _check_same_config(cfg: ExperimentConfig, folder: RunFolder) -> None:
    """The run in ``folder`` must be of ``cfg`` (``config_differences``: compared after loading, so keys
    added later take their defaults, and the options of a method both leave off do not count)."""
    if not folder.config.is_file():
        return
    differences = config_differences(load_config(folder.config, stored=True), cfg)
    if differences:
        raise ValueError(
            f"'{folder.path}' holds a run of another config (differs in {', '.join(differences[:6])}); "
            "delete it or choose another --out folder"
        )


def train_or_reuse(
    cfg: ExperimentConfig, run_dir: Path, quiet: bool = True, callbacks: Sequence[Any] = ()
) -> dict[str, Any]:
    """The summary of the run of ``cfg`` in ``run_dir``, training (or resuming) it if needed.

    A folder holding a run of a *different* config is an error, so a changed
    config never silently reuses stale results. ``callbacks`` (``dmlkit.engine.callbacks.Callback``) join the
    run's own, e.g. a search's pruning.
    """
    from dmlkit.assemble import build_trainer, resume_trainer

    folder = RunFolder(run_dir)
    _check_same_config(cfg, folder)
    if folder.summary.is_file():
        return json.loads(folder.summary.read_text())
    from dmlkit.pretrain import ensure_pretrained_for

    ensure_pretrained_for(cfg, quiet=quiet)  # a named pretrained backbone is built on first use
    if folder.last_checkpoint.is_file():
        return resume_trainer(run_dir, callbacks, quiet=quiet).fit()
    return build_trainer(
        cfg, run_dir, callbacks, quiet=quiet
    ).fit()  # a run stopped before its first checkpoint starts again


def reuse_only(cfg: ExperimentConfig, run_dir: Path) -> Summary:
    """The finished run's summary, or None when it has not finished."""
    folder = RunFolder(run_dir)
    _check_same_config(cfg, folder)
    return json.loads(folder.summary.read_text()) if folder.summary.is_file() else None


class Planner:
    """An ``Obtain`` that only records which runs are needed (their config text and folder), which are finished,
    and the kind of machine each needed run would record here (``run_machines.planned_kind`` with ``threads``)."""

    def __init__(self, threads: int = 1, quiet: bool = False) -> None:
        self.threads, self.quiet = threads, quiet
        self.runs: list[tuple[str, Path]] = []
        self.finished: list[Path] = []
        self.planned: list[tuple[str | None, Path]] = []

    def __call__(self, cfg: ExperimentConfig, run_dir: Path) -> Summary:
        from dmlkit.protocols.run_machines import planned_kind

        folder = RunFolder(run_dir)
        _check_same_config(cfg, folder)
        if folder.summary.is_file():
            self.finished.append(run_dir)
        else:
            from dmlkit.pretrain import ensure_pretrained_for

            ensure_pretrained_for(cfg, quiet=self.quiet)  # here, once, before parallel workers would each build it
            self.runs.append((dump_config(cfg), run_dir))
            self.planned.append((planned_kind(cfg.train, self.threads), run_dir))
        return None


class NotingRuns:
    """An ``Obtain`` that passes each run on to ``obtain`` and keeps its folder: the runs a table read, for the
    checks it makes before comparing them (``run_machines.check_comparable``)."""

    def __init__(self, obtain: Obtain) -> None:
        self.obtain = obtain
        self.run_dirs: list[Path] = []

    def __call__(self, cfg: ExperimentConfig, run_dir: Path) -> Summary:
        self.run_dirs.append(run_dir)
        return self.obtain(cfg, run_dir)


def worker_threads(jobs: int) -> int:
    """Intra-op threads of each of ``jobs`` parallel runs: the CPU cores shared out (at least 1).

    ``OMP_NUM_THREADS`` in the environment wins. Without this, every worker
    would start one thread per core and ``jobs`` workers oversubscribe the CPU
    (about 3x slower per step with 2 workers on 2 cores).
    """
    configured = os.environ.get("OMP_NUM_THREADS", "").strip()
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return max(1, (os.cpu_count() or 1) // jobs)


_worker_interrupted = False  # set in a worker process once one of its runs stopped on a signal


def _train_from_text(config_text: str, run_dir: str, threads: int = 0) -> tuple[str, str]:
    """Train one run in a worker: ``("done", "")``, ``("failed", traceback)``, ``("interrupted", message)``
    (SIGTERM / SIGINT: its ``last.pt`` is written) or ``("skipped", "")`` once this worker was interrupted."""
    import tempfile

    import torch

    from dmlkit.engine.signals import TrainingInterrupted

    global _worker_interrupted
    if _worker_interrupted:
        return "skipped", ""
    if threads > 0:
        torch.set_num_threads(threads)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        fh.write(config_text)
    try:
        train_or_reuse(load_config(fh.name), Path(run_dir))
    except TrainingInterrupted as stop:
        _worker_interrupted = True
        return "interrupted", str(stop)
    except Exception:  # reported by the parent, the other runs go on
        return "failed", traceback.format_exc()
    finally:
        Path(fh.name).unlink(missing_ok=True)
    return "done", ""


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel the queued runs and send SIGTERM to the workers once (each saves its run's ``last.pt``).

    SIGTERM rather than a forwarded SIGINT: a second SIGINT means "stop now" to a trainer.
    """
    workers = list((getattr(pool, "_processes", None) or {}).values())  # shutdown() forgets them
    pool.shutdown(wait=False, cancel_futures=True)
    for process in workers:
        if process.is_alive():
            os.kill(process.pid, signal.SIGTERM)


def _outcome(future: Future) -> tuple[str, str]:
    """``(status, report)`` of a finished future; a worker killed outright counts as interrupted."""
    if future.cancelled():
        return "skipped", ""
    try:
        return future.result()
    except BrokenProcessPool as err:  # e.g. an idle worker killed by the forwarded SIGTERM
        return "interrupted", str(err)


def train_in_parallel(runs: list[tuple[str, Path]], jobs: int) -> list[str]:
    """Train ``runs`` in ``jobs`` spawned processes; return the error reports of the runs that failed.

    Each worker gets ``worker_threads(jobs)`` intra-op threads. SIGTERM / SIGINT
    (to this process or to a worker) stops the batch cleanly: queued runs are
    cancelled, running ones write ``last.pt``, and ``RunsInterrupted`` is raised;
    the same command resumes them.
    """
    from dmlkit.engine.signals import StopSignals

    if not is_int(jobs) or jobs < 1:
        raise ValueError(f"jobs must be an int >= 1, got {jobs!r}")
    errors: list[str] = []
    counts = {"done": 0, "interrupted": 0, "cancelled": 0}
    stop_signal = 0
    context = multiprocessing.get_context("spawn")
    with StopSignals() as signals, ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        threads = worker_threads(jobs)
        futures = {pool.submit(_train_from_text, text, str(run_dir), threads): run_dir for text, run_dir in runs}
        pending, stopping = set(futures), False
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            cancelled = {f for f in pending if f.cancelled()}  # wait() never reports a future cancelled by shutdown
            done, pending = done | cancelled, pending - cancelled
            for future in done:
                status, report = _outcome(future)
                if status == "failed":
                    errors.append(f"{futures[future]}:\n{report}")
                elif status == "interrupted":
                    counts["interrupted"] += 1
                    stop_signal = stop_signal or signal.SIGTERM
                elif status == "done":
                    counts["done"] += 1
                else:
                    counts["cancelled"] += 1
            if signals.received and not stop_signal:
                stop_signal = signals.received
            if stop_signal and pending and not stopping:
                stopping = True
                _stop_workers(pool)
    if stop_signal:
        raise RunsInterrupted(stop_signal, counts["done"], counts["interrupted"], counts["cancelled"])
    return errors


def gather_runs(
    collect: Callable[[Obtain], T], jobs: int = 1, reuse: bool = False, quiet: bool = True
) -> tuple[T, list[str]]:
    """``collect(obtain)`` with the runs it needs trained first: the shared flow of protocol tables and sweeps.

    Unless ``reuse=True`` (which trains nothing), a first pass plans the missing runs (``collect`` with a
    ``Planner``) and refuses, before anything is trained, runs that would run here on another kind of machine than
    the finished runs of their table (``run_machines.check_before_training``); ``jobs > 1`` then trains them in
    that many processes. Returns what ``collect`` returns and the error reports of the runs that failed (the
    others are then reported from what finished).
    """
    errors: list[str] = []
    if not reuse:
        import torch

        from dmlkit.protocols.run_machines import check_before_training

        planner = Planner(worker_threads(jobs), quiet=False) if jobs != 1 else Planner(torch.get_num_threads(), quiet)
        collect(planner)
        check_before_training(planner.finished, planner.planned)  # a kept run of another kind stops it now
        if jobs != 1:
            errors = train_in_parallel(planner.runs, jobs)
    obtain: Obtain = reuse_only if reuse or errors else partial(train_or_reuse, quiet=quiet)
    return collect(obtain), errors


def check_batch_arguments(command: str, configs: Sequence[Any], seeds: Sequence[int], columns: str) -> None:
    """The checks every table of runs makes first: at least one config and one seed, a known column set."""
    from dmlkit.protocols.table import check_columns

    if not configs:
        raise ValueError(f"{command} needs at least one config file")
    if not seeds:
        raise ValueError(f"{command} needs at least one seed")
    check_columns(columns)
