"""How the trainer's Fabric is set up for one or many processes.

Launch with ``torchrun --nproc_per_node=N -m dmlkit train CONFIG`` (multi-node:
add ``--nnodes``, ``--node_rank``, ``--rdzv_endpoint`` as usual). torchrun sets
``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE``; the devices and nodes given to Fabric
are then taken from them (``train.devices`` is ignored), with the DDP strategy
(gloo on CPU, NCCL on GPUs). Without torchrun, ``train.devices > 1`` makes
Fabric start the processes itself (DDP as well).

``train.batch_size`` stays the *global* batch: each of the N processes embeds
``batch_size / N`` images, and the loss sees the gathered global batch
(``dmlkit.distributed``), so the run optimises what one process would.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from dmlkit.engine.config import EvalConfig, TrainConfig
from dmlkit.extras import require, require_all


def check_training_extras(evaluation: EvalConfig, plots: bool, tensorboard: bool = False) -> None:
    """Before a run starts: the packages it will need are installed, or one error lists the extras to install
    (``train`` always; ``faiss`` for ``eval.clustering``; ``plots`` for ``plots``; ``tensorboard`` for
    ``train.tensorboard``), so no run fails at its end."""
    needs = [("lightning", "train", "the training loop (Lightning Fabric)"), ("rich", "train", "the progress bar")]
    if evaluation.clustering:
        needs.append(("faiss", "faiss", "eval.clustering (NMI and F1 of faiss k-means; or set eval.clustering=false)"))
    if plots:
        needs.append(("matplotlib", "plots", "the run's plots (or set plots=false)"))
    if tensorboard:
        needs.append(("tensorboard", "tensorboard", "train.tensorboard (or set train.tensorboard=false)"))
    require_all(needs, "dmlkit training")


def new_fabric(t: TrainConfig) -> Any:
    """A ``lightning.fabric.Fabric`` for ``t`` (``fabric_options``), not launched."""
    fabric = require("lightning.fabric", "train", "dmlkit training")
    return fabric.Fabric(**fabric_options(t))


def torchrun_world(env: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """``(processes per node, nodes)`` when launched by torchrun with more than one process, else None."""
    env = os.environ if env is None else env
    if "LOCAL_WORLD_SIZE" not in env or "WORLD_SIZE" not in env:
        return None
    try:
        world, local = int(env["WORLD_SIZE"]), int(env["LOCAL_WORLD_SIZE"])
    except ValueError:
        raise ValueError(
            f"WORLD_SIZE={env['WORLD_SIZE']!r} / LOCAL_WORLD_SIZE={env['LOCAL_WORLD_SIZE']!r} are not integers; launch with torchrun"
        ) from None
    if world <= 1:
        return None
    if local < 1 or world % local:
        raise ValueError(
            f"WORLD_SIZE={world} is not a multiple of LOCAL_WORLD_SIZE={local}; use the same --nproc_per_node on every node"
        )
    return local, world // local


def fabric_options(t: TrainConfig, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Keyword arguments of ``lightning.fabric.Fabric`` for ``t`` in the current launch environment."""
    options: dict[str, Any] = {"accelerator": t.accelerator, "devices": t.devices, "precision": t.precision}
    launched = torchrun_world(env)
    if launched is not None:
        options.update(devices=launched[0], num_nodes=launched[1], strategy="ddp")
    elif isinstance(t.devices, int) and t.devices > 1:
        options["strategy"] = "ddp"
    return options


#: ``train.precision`` values and what each needs of the device.
PRECISIONS = ("32-true", "64-true", "bf16-mixed", "bf16-true", "16-mixed", "16-true")


def resolved_accelerator(accelerator: str) -> str:
    import torch

    if accelerator == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if accelerator == "gpu" else accelerator


def check_precision(t: TrainConfig) -> None:
    """Refuse a ``train.precision`` the device cannot run, with what to set, before any run folder is made.

    fp16 on the CPU: Lightning would silently train in bf16 instead (a run that is not what its config says);
    bf16 on a GPU without bf16 arithmetic (before Ampere) would emulate it slowly or fail.
    """
    import torch

    if t.precision not in PRECISIONS:
        raise ValueError(f"unknown train.precision {t.precision!r}; valid values are: {', '.join(PRECISIONS)}")
    device = resolved_accelerator(t.accelerator)
    if device == "cpu" and t.precision.startswith("16-"):
        raise ValueError(
            f"train.precision {t.precision} needs a CUDA GPU; on the CPU Lightning would silently train in bf16 instead. "
            "Set train.precision: bf16-mixed (or 32-true) for the CPU"
        )
    if device == "cuda" and t.precision.startswith("bf16") and not torch.cuda.is_bf16_supported():
        raise ValueError(
            f"train.precision {t.precision}: this GPU ({torch.cuda.get_device_name()}) has no bf16 arithmetic; "
            "set train.precision: 16-mixed (or 32-true)"
        )
