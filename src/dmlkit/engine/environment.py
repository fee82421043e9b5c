"""What a run ran on: its world size, device kind, thread count and package versions (``environment.json``).

A CPU is described with the vector instruction set ATen dispatches its kernels to (``cpu_capability``: ``AVX2``,
``AVX512``, ...): kernels of another width sum in another order, so the same run on an AVX2 and an AVX512 machine
ends on other weights (docs/results/font_testbed.md measured it on the pretraining of a backbone).

The trainer writes the file when a run starts. The world size is part of the experiment: each
process normalises its own slice of the global batch (batch normalisation) and the gathered loss
is summed in another order, so a run resumed with another number of processes ends elsewhere
than the uninterrupted run. ``check_resume`` therefore refuses another world size, and returns
the other differences (device, threads, package versions), which change only the last bits of
the floats; the trainer warns about those and lists every resume under ``resumes``.
"""

from __future__ import annotations

import json
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

__all__ = ["PACKAGES", "check_resume", "cpu_capability", "current_environment", "package_versions", "read_environment"]

#: Distributions whose versions a run records (the first installed name of each tuple).
PACKAGES = (
    ("dmlkit",),
    ("torch",),
    ("lightning",),
    ("pytorch-metric-learning",),
    ("numpy",),
    ("faiss-cpu", "faiss-gpu", "faiss"),
)


def package_versions() -> dict[str, str]:
    """``{distribution: version}`` of ``PACKAGES`` that are installed, and Python's."""
    versions = {"python": platform.python_version()}
    for names in PACKAGES:
        for name in names:
            try:
                versions[name] = metadata.version(name)
                break
            except metadata.PackageNotFoundError:
                continue
    return versions


def cpu_capability() -> str:
    """The instruction set ATen's CPU kernels run with here (``torch.backends.cpu.get_cpu_capability()``: the
    machine's widest, or what ``ATEN_CPU_CAPABILITY`` forces), e.g. ``AVX2``."""
    return str(torch.backends.cpu.get_cpu_capability())


def device_description(device: torch.device) -> dict[str, str]:
    """The kind of device a process trains on: ``{"type": "cuda", "name": "NVIDIA H100 ..."}`` or the CPU with its
    kernels' instruction set (``{"type": "cpu", "name": "x86_64", "capability": "AVX2"}``)."""
    if device.type == "cuda":
        return {"type": "cuda", "name": torch.cuda.get_device_name(device)}
    return {"type": device.type, "name": platform.processor() or platform.machine(), "capability": cpu_capability()}


def current_environment(world_size: int, num_nodes: int, device: torch.device, precision: str) -> dict[str, Any]:
    """The environment of this process, as ``environment.json`` records it."""
    return {
        "world_size": int(world_size),
        "num_nodes": int(num_nodes),
        "device": device_description(device),
        "precision": str(precision),
        "threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "versions": package_versions(),
    }


def read_environment(path: str | Path) -> dict[str, Any] | None:
    """The recorded environment, or None for a run folder written before dmlkit recorded one."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        values = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(
            f"'{path}' is not JSON ({err}); it records the run's environment: restore or delete it"
        ) from err
    return values if isinstance(values, dict) else None


_COMPARED = ("device", "threads", "versions", "precision")


def check_resume(saved: dict[str, Any], current: dict[str, Any], run_dir: str | Path) -> dict[str, list[Any]]:
    """Refuse resuming with another world size (``ValueError`` with the reason); return the other differences.

    The differences map each key (``device``, ``threads``, ``versions``, ``precision``) that changed to
    ``[recorded, now]``.
    """
    before, now = saved.get("world_size"), current["world_size"]
    if before is not None and before != now:
        nodes = int(saved.get("num_nodes") or 1)
        launch = (
            "dmlkit train"
            if before == 1
            else (
                f"torchrun {f'--nnodes={nodes} ' if nodes > 1 else ''}--nproc_per_node={before // nodes} -m dmlkit train"
            )
        )
        raise ValueError(
            f"run '{run_dir}' was trained by {before} process(es) and this resume has {now}: each process normalises "
            "its own slice of the global batch, so another process count would end with other weights and metrics "
            f"than the uninterrupted run. Resume it with: {launch} --resume {run_dir} "
            "(or start a new run with this process count)"
        )
    return {
        key: [saved.get(key), current.get(key)] for key in _COMPARED if key in saved and saved[key] != current.get(key)
    }
