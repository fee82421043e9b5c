"""``dmlkit train``, ``pretrain``, ``floors`` and ``evaluate``: one run, its backbone, its floors, its scores."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from dmlkit.cli.options import add_columns, add_overrides, add_quiet, add_seeds
from dmlkit.extras import require

__all__ = ["COMMANDS", "print_summary"]


def _train_arguments(train: argparse.ArgumentParser) -> None:
    train.add_argument("config", nargs="?", help="experiment YAML, e.g. configs/quickstart.yaml")
    add_overrides(train)
    train.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    train.add_argument("--run-dir", help="where to write the run (default: OUTPUT_DIR/NAME from the config)")
    add_quiet(train)
    train.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module or .py file registering your own components (added to the config's imports; repeatable)",
    )


def _pretrain_arguments(pretrain: argparse.ArgumentParser) -> None:
    pretrain.add_argument(
        "target",
        help="a config whose model.pretrained names a backbone, or that name (glyphs-resnet20, "
        "glyphs-resnet20@seed1: another pretraining seed)",
    )
    add_overrides(pretrain, "override a value of the config (repeatable)")
    pretrain.add_argument("--force", action="store_true", help="train it again even if a valid cached copy exists")
    add_quiet(pretrain)


def _floors_arguments(floors: argparse.ArgumentParser) -> None:
    floors.add_argument("config", help="experiment YAML whose data, model and eval sections are used")
    floors.add_argument("--split", default=None, help="split to score (default: the config's eval.split)")
    add_seeds(floors, [0], "seeds of the random weights (default: 0)")
    add_overrides(floors, "override a config value (repeatable)")
    add_columns(floors)
    floors.add_argument("--out", default=None, help="also write the table (markdown) and floors.json beside it")
    add_quiet(floors, "no progress lines on stderr")


def _evaluate_arguments(evaluate: argparse.ArgumentParser) -> None:
    evaluate.add_argument("run", help="a run folder, or a best.pt/last.pt inside one")
    evaluate.add_argument("--split", default="test", help="dataset split to evaluate (default: test)")
    evaluate.add_argument(
        "--diagnostics",
        action="store_true",
        help="also write diagnostics_<split>.json and geometry plots (SFT r_w, divergences, "
        "rotation residuals, spectra; Lemma 3-4 bounds of CE'/CE'' losses)",
    )


def _cmd_train(args: argparse.Namespace) -> int:
    import time

    from dmlkit.assemble import build_trainer, resume_trainer
    from dmlkit.config import load_config

    started = time.monotonic()
    if args.resume:
        if args.config or args.overrides or args.imports:
            raise ValueError("--resume continues a run with its own saved config; drop CONFIG, --set and --import")
        trainer = resume_trainer(args.resume, quiet=args.quiet)
    else:
        if not args.config:
            raise ValueError("dmlkit train needs a CONFIG file (e.g. configs/quickstart.yaml) or --resume RUN_DIR")
        from dmlkit.engine.run_folder import saved_config_folder

        saved_in = saved_config_folder(args.config)  # a run's own config.yaml: a stored record, and that run's folder
        # --import modules are recorded like the config's own imports
        cfg = load_config(args.config, args.overrides, imports=args.imports, stored=saved_in is not None)
        from dmlkit.pretrain import ensure_pretrained_for

        ensure_pretrained_for(cfg, quiet=args.quiet)  # a named pretrained backbone is built on first use
        run_dir = args.run_dir or saved_in
        if not args.quiet:
            print(
                f"dmlkit train: loading {cfg.data.name} and building the model ({cfg.model.backbone})", file=sys.stderr
            )
        trainer = build_trainer(cfg, run_dir, quiet=args.quiet)
    from dmlkit.engine.signals import TrainingInterrupted

    try:
        summary = trainer.fit()
    except TrainingInterrupted as stop:  # SIGTERM / SIGINT: last.pt written, exit 143 / 130
        print(f"dmlkit train: {stop}", file=sys.stderr)
        return stop.exit_code
    if trainer.fabric.is_global_zero:
        print_summary(
            summary, trainer.folder.path, wall_seconds=time.monotonic() - started, resumed_at=trainer.resumed_at
        )
    _close_process_group()
    return 0


def _close_process_group() -> None:
    """Shut a finished multi-process run's process group down, its resources released while Python still runs
    (the process then leaves through ``cli.entry``). Only on success: after a peer's failure the survivors exit
    with their own error."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def metrics_table(title: str, metrics: dict[str, Any]) -> Any:
    """A rich table of ``metrics`` (fractions) in percent, the unit of every printed table of dmlkit."""
    require("rich", "train", "dmlkit's tables of metrics")
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    table.add_column("%", justify="right")
    for key, value in metrics.items():
        table.add_row(key, f"{100 * value:.2f}" if isinstance(value, (int, float)) else str(value))
    return table


def print_summary(
    summary: dict[str, Any],
    run_dir: Path,
    wall_seconds: float | None = None,
    resumed_at: tuple[int, float] | None = None,
) -> None:
    """The test metrics of a finished run as a table, in percent as every printed table of dmlkit
    (``summary.json`` and the JSON of ``dmlkit evaluate`` keep fractions). ``resumed_at``: the step and train
    seconds a resumed run continued from, so the train time (of the whole run) and the wall time (of this
    process) are told apart."""
    require("rich", "train", "dmlkit's tables of metrics")
    from rich.console import Console

    console = Console()
    title = f"{summary['name']}: test metrics after {summary['steps']} steps (best step {summary['best_step']})"
    console.print(metrics_table(title, summary["test"]))
    train = f"train time {summary['train_seconds']:.0f} s"
    if resumed_at is not None:
        train += f", {resumed_at[1]:.0f} s of it before the resume at step {resumed_at[0]}"
    wall = (
        ""
        if wall_seconds is None
        else (
            f"; wall time {wall_seconds:.0f} s{' of this resume' if resumed_at is not None else ''} with loading, "
            "evaluation and plots"
        )
    )
    console.print(f"run folder: {run_dir}  ({train}{wall})")


def _cmd_evaluate(args: argparse.Namespace) -> int:
    require("rich", "train", "dmlkit evaluate")  # its table, checked before the evaluation
    from dmlkit.assemble import evaluate_run

    metrics = evaluate_run(args.run, split=args.split, quiet=os.environ.get("RANK", "0") != "0")
    if os.environ.get("RANK", "0") != "0":  # under torchrun every process evaluates its shard; rank 0 reports
        return 0
    if args.diagnostics:
        from dmlkit.report.diagnostics import run_diagnostics

        metrics = {"metrics": metrics, "diagnostics": run_diagnostics(args.run, split=args.split)}
    from rich.console import Console

    scores = metrics.get("metrics", metrics)
    Console(stderr=True).print(
        metrics_table(f"{Path(args.run).name}: {args.split} metrics in % (stdout: the JSON, fractions)", scores)
    )
    print(json.dumps(metrics, indent=2))
    return 0


def _cmd_pretrain(args: argparse.Namespace) -> int:
    from dmlkit.assemble.pretrained import (
        canonical_pretrained_name,
        is_pretrained_name,
        list_pretrained,
        read_pretrained,
    )
    from dmlkit.config import load_config
    from dmlkit.pretrain import ensure_pretrained, pretrained_name

    if is_pretrained_name(args.target) and not Path(args.target).is_file():
        name = canonical_pretrained_name(args.target)
    else:
        name = pretrained_name(load_config(args.target, args.overrides))
        if name is None:
            raise ValueError(
                f"'{args.target}' names no pretrained backbone in model.pretrained; valid names: "
                f"{', '.join(list_pretrained())} (each also as <name>@seed<N>)"
            )
    path = ensure_pretrained(name, quiet=args.quiet, force=args.force)
    entry = read_pretrained(name, path)
    summary, val = entry["summary"], entry["summary"].get("best_val", {})
    print(
        f"pretrained backbone '{name}': {path}  (best step {summary.get('best_step')}, val "
        f"{val.get('metric')} {val.get('value', float('nan')):.4f}, train time {summary.get('train_seconds', 0):.0f} s; "
        f"tensor checksum {entry['checksum'][:16]}, built with {entry['threads']} thread(s) on {entry['cpu_capability']} "
        "CPU kernels)"
    )
    return 0


def _cmd_floors(args: argparse.Namespace) -> int:
    from dmlkit.config import load_config
    from dmlkit.pretrain import ensure_pretrained_for
    from dmlkit.protocols.floors import floor_table

    cfg = load_config(args.config, args.overrides)
    ensure_pretrained_for(cfg)
    say = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    print(floor_table(cfg, split=args.split, seeds=args.seeds, columns=args.columns, out=args.out, progress=say))
    return 0


COMMANDS = {
    "train": ("train a model from a YAML config into a run folder", _train_arguments, _cmd_train),
    "pretrain": (
        "build (once) the pretrained backbone a config names in model.pretrained",
        _pretrain_arguments,
        _cmd_pretrain,
    ),
    "floors": (
        "scores of a split before any training: raw pixels, the untrained model (and the pretrained backbone, "
        "not fine-tuned): a table's floor rows",
        _floors_arguments,
        _cmd_floors,
    ),
    "evaluate": ("evaluate a run folder's best checkpoint", _evaluate_arguments, _cmd_evaluate),
}
