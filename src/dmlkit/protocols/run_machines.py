"""Pair runs only when they ran on one kind of machine: the same kernels, thread count, precision and process count.

A fixed seed reproduces a run on one kind of machine, not across kinds. Floating-point sums depend on how they are
split: ATen's CPU kernels add 8 or 16 lanes at a time (AVX2 or AVX-512), a reduction over ``T`` threads adds ``T``
partial sums, a GPU model and precision have their own kernels, and ``P`` processes average ``P`` gradients. The
first step's rounding differs, and 1,000 steps later the two runs of one config and seed are two samples of its
spread, not one. A paired table counts ``run - baseline`` per seed as the method's effect only because both sides
shared everything but the method; a pair that straddles two kinds of machine adds their difference to it. Each run
records its machine in ``environment.json`` (``engine.environment.current_environment``); ``check_same_machine``
refuses a table whose runs record two kinds. Run folders that record no environment are not checked.

This is what lets a project keep the small records of finished runs (``config.yaml``, ``summary.json``,
``environment.json``) and pair new runs against them later: on the same kind of machine the protocol reuses them,
on another it says so instead of pairing. ``check_before_training`` says it before a command trains anything: the
runs it would train here are compared with the finished runs of the table, so a kept record of another kind stops
the command at once instead of after hours of training.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from dmlkit.protocols.backbone_weights import check_same_weights
from dmlkit.protocols.run_records import first_runs, recorded_environment

__all__ = ["check_before_training", "check_comparable", "check_same_machine", "machine_kind", "planned_kind"]


def _describe(environment: dict[str, Any]) -> str | None:
    device = environment.get("device")
    if not isinstance(device, dict) or "type" not in device:
        return None
    if device["type"] == "cpu":
        kernels = f"cpu {device.get('capability', '?')}, {environment.get('threads', '?')} thread(s)"
    else:
        kernels = f"{device['type']} {device.get('name', '?')}"
    processes = f", {environment.get('world_size', 1)} process(es) on {environment.get('num_nodes', 1)} node(s)"
    return f"{kernels}, precision {environment.get('precision', '?')}{processes}"


def machine_kind(run_dir: Path) -> str | None:
    """What decides a run's floating-point results beyond its config and seed, as one readable string
    (``"cpu AVX2, 1 thread(s), precision 32-true, 1 process(es) on 1 node(s)"``), or ``None`` when the run records
    no environment (a folder written before dmlkit recorded one, or a run stopped before it started)."""
    environment = recorded_environment(run_dir)
    return None if environment is None else _describe(environment)


def planned_kind(train: Any, threads: int) -> str | None:
    """The ``machine_kind`` a run of ``train`` (a ``TrainConfig``) started by this process would record, given the
    intra-op ``threads`` the process gives it (``train.threads`` wins); ``None`` when it is not known before the run
    starts: an accelerator, several processes or a torchrun launch."""
    from dmlkit.engine.environment import cpu_capability
    from dmlkit.engine.launch import resolved_accelerator, torchrun_world

    if train.devices != 1 or torchrun_world() is not None or resolved_accelerator(train.accelerator) != "cpu":
        return None
    device = {"type": "cpu", "capability": cpu_capability()}
    own = train.threads if train.threads is not None else threads
    return _describe({"device": device, "threads": own, "precision": train.precision, "world_size": 1, "num_nodes": 1})


def _refuse(kinds: dict[str, list[str]], verb: str = "ran") -> None:
    if len(kinds) > 1:
        listed = "; ".join(f"{kind}: {first_runs(runs)}" for kind, runs in sorted(kinds.items()))
        raise ValueError(
            f"the runs of this table {verb} on {len(kinds)} kinds of machine ({listed}): one config and seed gives "
            "other numbers on other kernels, thread counts, precisions or process counts, so pairing them would "
            "count the machines' difference as the method's. Train the runs of the other kind again here (delete "
            "their folders), or keep each kind's runs under their own --out (for a CPU, OMP_NUM_THREADS or "
            "train.threads sets the thread count)"
        )


def _recorded_kinds(run_dirs: Iterable[Path]) -> dict[str, list[str]]:
    kinds: dict[str, list[str]] = {}
    for run_dir in run_dirs:
        kind = machine_kind(run_dir)
        if kind is not None:
            kinds.setdefault(kind, []).append(Path(run_dir).name)
    return kinds


def check_same_machine(run_dirs: Iterable[Path]) -> None:
    """Raise ``ValueError`` when the runs of one table ran on more than one kind of machine (``machine_kind``)."""
    _refuse(_recorded_kinds(run_dirs))


def check_comparable(run_dirs: Iterable[Path]) -> None:
    """The checks every table of runs makes before it compares them: one set of weights per pretrained backbone
    name (``check_same_weights``) and one kind of machine (``check_same_machine``)."""
    run_dirs = list(run_dirs)
    check_same_weights(run_dirs)
    check_same_machine(run_dirs)


def check_before_training(finished: Iterable[Path], planned: Iterable[tuple[str | None, Path]]) -> None:
    """Raise ``ValueError``, before anything is trained, when the runs a command would train here (``planned``:
    ``(planned_kind, run folder)``) are of another kind of machine than the ``finished`` runs of their table."""
    kinds = _recorded_kinds(finished)
    for kind, run_dir in planned:
        if kind is not None:
            kinds.setdefault(kind, []).append(f"{Path(run_dir).name} (to train)")
    _refuse(kinds, "(those finished and those this command would train here) would run")
