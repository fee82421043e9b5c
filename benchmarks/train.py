"""Trainer overhead: steps/s of dmlkit's Trainer against a bare PyTorch loop over the same parts.

Both sides train the same config's parts, built by ``dmlkit.assemble.build_run`` from the same seed
(same initial weights, same batch sampler order, same objective and optimiser groups), for the
same number of steps, in one process, interleaved round by round (the order alternates) so that
load from other processes hits both alike:

* trainer: ``build_trainer(cfg).fit()`` with ``quiet=True``; its ``train_seconds`` is the wall time
  of the training steps alone (data loading, step, logging, callbacks, signal checks), without
  set-up, validation and the final test;
* bare: ``for images, labels in DataLoader(train, batch_sampler=sampler)``: forward, objective,
  ``zero_grad``, ``backward``, ``step``; nothing else.

Goal of the methods-as-plug-ins issue: the trainer costs at most 5% more per step.
Usage: ``dmlkit bench train [--steps 60] [--repeats 3] [--set key=value ...]`` (default: the
quickstart config on 300 glyph classes, so that the final test of each trainer run is short).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import torch
from torch.utils.data import DataLoader

from benchmarks import _harness as h

DEFAULT_SETS = ("data.max_classes=300", "plots=false", "eval.clustering=false")


def _config(config: str, steps: int, sets: Sequence[str]) -> Any:
    from dmlkit.config import load_config

    return load_config(
        config, [*DEFAULT_SETS, *sets, f"train.max_steps={steps}", f"train.val_every={steps}", "train.patience=1000"]
    )


def trainer_seconds(cfg: Any, folder: Path) -> float:
    """Seconds of the trainer's training steps (``summary['train_seconds']``)."""
    from dmlkit.assemble import build_trainer

    summary = build_trainer(cfg, folder, quiet=True).fit()
    if summary["steps"] != cfg.train.max_steps:
        raise RuntimeError(f"the trainer stopped after {summary['steps']} of {cfg.train.max_steps} steps")
    return float(summary["train_seconds"])


def bare_step(
    model: Any, objective: Any, optimizer: Any, images: torch.Tensor, labels: torch.Tensor, step: int, bf16: bool
) -> None:
    """One training step as the Trainer takes it: the model's forward under bfloat16 autocast when ``bf16``
    (its output in float32, as Fabric's precision plug-in), the objective in float32, backward, optimiser step."""
    from contextlib import nullcontext

    with torch.autocast(images.device.type, dtype=torch.bfloat16) if bf16 else nullcontext():
        embeddings = model(images).float()
    total, _ = objective(embeddings, labels, {"step": step})
    optimizer.zero_grad(set_to_none=True)
    total.backward()
    optimizer.step()


def bare_seconds(cfg: Any, device: str = "cpu") -> float:
    """Seconds of the same steps in a plain loop over the same parts, on ``device`` (``cfg.train.precision``
    ``32-true`` or ``bf16-mixed``: the model's forward under bfloat16 autocast, as Fabric does), with pinned memory and
    non-blocking copies on a GPU."""
    from dmlkit.assemble import build_run
    from dmlkit.engine.optim import build_optimizer

    precision = cfg.train.precision
    if precision not in ("32-true", "bf16-mixed"):
        raise ValueError(f"the bare loop runs precision 32-true or bf16-mixed; got {precision!r}")
    parts = build_run(cfg)
    model, objective, train = parts.model.to(device), parts.objective.to(device), parts.splits.train
    optimizer = build_optimizer(parts.param_groups, cfg.train)
    parts.batch_sampler.set_epoch(0)
    train.set_epoch(0)
    on_gpu = torch.device(device).type == "cuda"
    if on_gpu:  # as the Trainer does
        torch.backends.cudnn.benchmark = True
    loader = DataLoader(train, batch_sampler=parts.batch_sampler, num_workers=cfg.data.num_workers, pin_memory=on_gpu)
    model.train()
    steps, started = 0, time.perf_counter()
    while steps < cfg.train.max_steps:
        for images, labels in loader:
            images, labels = images.to(device, non_blocking=on_gpu), labels.to(device, non_blocking=on_gpu)
            bare_step(model, objective, optimizer, images, labels, steps, precision == "bf16-mixed")
            steps += 1
            if steps == cfg.train.max_steps:
                break
        parts.batch_sampler.set_epoch(1)
    if on_gpu:
        torch.cuda.synchronize()
    return time.perf_counter() - started


def run(
    config: str = "configs/quickstart.yaml", steps: int = 60, repeats: int = 3, sets: Sequence[str] = ()
) -> dict[str, Any]:
    cfg = _config(config, steps, sets)
    trainer, bare = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            order = ("trainer", "bare") if r % 2 == 0 else ("bare", "trainer")
            for side in order:
                if side == "trainer":
                    trainer.append(trainer_seconds(cfg, Path(tmp) / f"run{r}"))
                else:
                    bare.append(bare_seconds(cfg))
    ratios = [t / b for t, b in zip(trainer, bare)]
    return {
        "config": config,
        "steps": steps,
        "repeats": repeats,
        "sets": list(sets),
        "threads": torch.get_num_threads(),
        "trainer_seconds": trainer,
        "bare_seconds": bare,
        "ratios": ratios,
        "median_ratio": statistics.median(ratios),
    }


def format_table(r: dict[str, Any]) -> str:
    rows = []
    for name, key in (("trainer", "trainer_seconds"), ("bare loop", "bare_seconds")):
        per_step = statistics.median(r[key]) / r["steps"]
        rows.append([name, f"{1.0 / per_step:.2f}", f"{1000 * per_step:.1f}", ", ".join(f"{s:.1f}" for s in r[key])])
    spread = f"{min(r['ratios']):.3f}x .. {max(r['ratios']):.3f}x"
    head = f"{r['config']}, {r['steps']} steps x {r['repeats']} interleaved rounds, {r['threads']} threads"
    return (
        f"{head}\n"
        + h.table(["loop", "steps/s", "ms/step", "seconds per round"], rows)
        + f"\ntrainer / bare per step: median {r['median_ratio']:.3f}x (rounds: {spread}; goal <= 1.05x)"
    )


def _parser():
    p = h.parser("train", __doc__)
    p.add_argument("--config", default="configs/quickstart.yaml")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.steps < 1 or args.repeats < 1:
        raise SystemExit("--steps and --repeats must be positive")
    return h.main(args, lambda a: run(a.config, a.steps, a.repeats, a.sets), format_table)


if __name__ == "__main__":
    raise SystemExit(main())
