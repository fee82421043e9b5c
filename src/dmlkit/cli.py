"""The ``dmlkit`` command: train, evaluate, data, bench.

Heavy imports (torch, Lightning) happen inside the sub-commands so that
``dmlkit --help`` answers at once.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

BENCHMARKS = {
    "retrieval": "dmlkit.bench.retrieval",
    "fastap": "dmlkit.bench.fastap",
    "sft": "dmlkit.bench.sft",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dmlkit", description="Deep metric learning: train, evaluate, benchmark.")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a model from a YAML config into a run folder")
    train.add_argument("config", nargs="?", help="experiment YAML, e.g. configs/quickstart.yaml")
    train.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                       help="override a config value, e.g. --set train.lr=1e-4 (repeatable)")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    train.add_argument("--run-dir", help="where to write the run (default: OUTPUT_DIR/NAME from the config)")
    train.add_argument("--quiet", action="store_true", help="no progress output")

    evaluate = sub.add_parser("evaluate", help="evaluate a run folder's best checkpoint")
    evaluate.add_argument("run", help="a run folder, or a best.pt/last.pt inside one")
    evaluate.add_argument("--split", default="test", help="dataset split to evaluate (default: test)")
    evaluate.add_argument("--diagnostics", action="store_true",
                          help="also write diagnostics_<split>.json and geometry plots (SFT r_w, divergences, "
                               "rotation residuals, spectra; Lemma 3-4 bounds of CE'/CE'' losses)")

    protocol = sub.add_parser(
        "protocol", help="run a protocol (conventional, holdout, fair) for configs over seeds and write a results table"
    )
    protocol.add_argument("name", choices=["conventional", "holdout", "fair"])
    protocol.add_argument("configs", nargs="+", help="experiment YAML files, one table row each")
    protocol.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (default: 0 1 2)")
    protocol.add_argument("--out", required=True, help="folder for the runs, results.md and results.json")
    protocol.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                          help="override applied to every config (repeatable)")
    protocol.add_argument("--columns", default="thesis", help="column set: thesis (P@1, MAP@R), sft (R@K, NMI, F1), all")
    protocol.add_argument("--folds", type=int, default=4, help="folds of the fair protocol (default: 4)")
    protocol.add_argument("--jobs", type=int, default=1, help="train the missing runs in this many processes (default: 1)")
    protocol.add_argument("--reuse-only", action="store_true", help="train nothing; tabulate the finished runs")

    data = sub.add_parser("data", help="list or prepare datasets")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    data_sub.add_parser("list", help="list the registered datasets")
    prepare = data_sub.add_parser("prepare", help="download / render and cache a dataset")
    prepare.add_argument("name")
    prepare.add_argument("--root", default=None)

    bench = sub.add_parser("bench", help="run a benchmark", description=f"benchmarks: {', '.join(BENCHMARKS)}")
    bench.add_argument("name", choices=sorted(BENCHMARKS))
    bench.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the benchmark")
    return parser


def _cmd_train(args: argparse.Namespace) -> int:
    from dmlkit.config import load_config
    from dmlkit.engine.trainer import Trainer, default_run_dir

    if args.resume:
        if args.config or args.overrides:
            raise ValueError("--resume continues a run with its own saved config; drop CONFIG and --set")
        trainer = Trainer.resume(args.resume, quiet=args.quiet)
    else:
        if not args.config:
            raise ValueError("dmlkit train needs a CONFIG file (e.g. configs/quickstart.yaml) or --resume RUN_DIR")
        cfg = load_config(args.config, args.overrides)
        trainer = Trainer(cfg, args.run_dir or default_run_dir(cfg), quiet=args.quiet)
    summary = trainer.fit()
    print_summary(summary, trainer.folder.path)
    return 0


def print_summary(summary: dict[str, Any], run_dir: Path) -> None:
    """The test metrics of a finished run as a table."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{summary['name']}: test metrics after {summary['steps']} steps (best step {summary['best_step']})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in summary["test"].items():
        table.add_row(key, f"{value:.4f}")
    console = Console()
    console.print(table)
    console.print(f"run folder: {run_dir}  (train time {summary['train_seconds']:.0f} s)")


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from dmlkit.engine.evaluate import evaluate_run

    metrics = evaluate_run(args.run, split=args.split)
    if args.diagnostics:
        from dmlkit.engine.diagnostics import run_diagnostics

        metrics = {"metrics": metrics, "diagnostics": run_diagnostics(args.run, split=args.split)}
    print(json.dumps(metrics, indent=2))
    return 0


def _cmd_protocol(args: argparse.Namespace) -> int:
    from dmlkit.protocols import run_protocol

    table = run_protocol(args.name, args.configs, args.out, seeds=args.seeds, overrides=args.overrides,
                         columns=args.columns, folds=args.folds, jobs=args.jobs, reuse=args.reuse_only)
    print(table)
    return 0


def _cmd_data(args: argparse.Namespace) -> int:
    from dmlkit.data import list_datasets, prepare_dataset

    if args.data_command == "list":
        for name in list_datasets():
            print(name)
        return 0
    path = prepare_dataset(args.name, root=args.root)
    print(f"{args.name}: ready at {path}")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    import importlib

    module = importlib.import_module(BENCHMARKS[args.name])
    return module.main(args.args) or 0


COMMANDS = {"train": _cmd_train, "evaluate": _cmd_evaluate, "data": _cmd_data, "protocol": _cmd_protocol, "bench": _cmd_bench}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (ValueError, FileNotFoundError) as err:
        print(f"dmlkit {args.command}: error: {err}", file=sys.stderr)
        return 2
    except RuntimeError as err:
        from dmlkit.engine.trainer import NonFiniteLossError

        if isinstance(err, NonFiniteLossError):
            print(f"dmlkit {args.command}: error: {err}", file=sys.stderr)
            return 3
        raise


if __name__ == "__main__":
    sys.exit(main())
