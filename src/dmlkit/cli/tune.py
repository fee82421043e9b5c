"""``dmlkit tune``: a hyperparameter study of a config (``dmlkit.tune``), and ``--list-spaces``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from dmlkit.cli.options import add_overrides, add_quiet

__all__ = ["COMMANDS"]


def _tune_arguments(tune: argparse.ArgumentParser) -> None:
    tune.add_argument("config", nargs="?", help="experiment YAML to tune, e.g. configs/quickstart.yaml")
    tune.add_argument(
        "--trials",
        type=int,
        default=20,
        help="trials of the study, counted over every worker and "
        "machine; running again with more goes on (default: 20)",
    )
    tune.add_argument(
        "--out",
        default=None,
        help="study folder: trials' run folders, journal, results (default: OUTPUT_DIR/tune/NAME of the config)",
    )
    tune.add_argument(
        "--space",
        action="append",
        default=[],
        metavar="NAME|FILE",
        help="search space: a name of --list-spaces or a YAML file; repeatable (merged). "
        "Default: the space of the config's loss",
    )
    add_overrides(tune)
    tune.add_argument(
        "--protocol",
        choices=["holdout", "fair"],
        default="holdout",
        help="holdout: the config's validation classes; fair: the mean over --folds class-disjoint "
        "folds of the training classes, with its standard error (Reality Check)",
    )
    tune.add_argument("--folds", type=int, default=4, help="folds of the fair protocol (default: 4)")
    tune.add_argument("--sampler", choices=["tpe", "gp", "random"], default="tpe", help="default: tpe (multivariate)")
    tune.add_argument("--seed", type=int, default=0, help="seed of the sampler (default: 0)")
    tune.add_argument(
        "--startup-trials",
        type=int,
        default=10,
        help="random trials before the model-based sampler starts (default: 10)",
    )
    tune.add_argument(
        "--pruner",
        choices=["none", "median", "halving", "hyperband"],
        default="none",
        help="stop unpromising trials on their validation curve (default: none)",
    )
    tune.add_argument("--jobs", type=int, default=1, help="worker processes on this machine (default: 1)")
    tune.add_argument(
        "--storage",
        default=None,
        metavar="URL",
        help="a PostgreSQL URL shared by workers on many machines (each runs the same command); "
        "default: the study folder's journal file",
    )
    tune.add_argument(
        "--heartbeat",
        type=int,
        default=30,
        metavar="SECONDS",
        help="PostgreSQL: a worker's heartbeat; a trial whose worker missed 4 is retried (default: 30)",
    )
    tune.add_argument(
        "--study-name", default=None, help="name of the study in the storage (default: the folder's name)"
    )
    tune.add_argument(
        "--then-test",
        dest="test_seeds",
        type=int,
        nargs="*",
        default=None,
        metavar="SEED",
        help="when the study has its trials, test the best values on the test classes: the fair "
        "protocol's fold models (separated and concatenated), and best.yaml retrained on these "
        "seeds (mean ± std, 95%% interval); written to STUDY/test.md",
    )
    tune.add_argument(
        "--status",
        metavar="STUDY_DIR",
        default=None,
        help="write and print a study's results as they stand (trials table, best values), running "
        "no trial; with --storage for a study in PostgreSQL",
    )
    tune.add_argument("--list-spaces", action="store_true", help="list the shipped search spaces and their ranges")
    add_quiet(tune, "no progress lines")


def _list_spaces() -> int:
    from dmlkit.tune.catalog import space_sources

    for name, (kind, space) in sorted(space_sources().items()):
        print(f"{name} ({kind})")
        for parameter in space.parameters:
            print(f"  {parameter.key}: {parameter.describe()}")
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    if args.list_spaces:
        return _list_spaces()
    if args.status:
        from dmlkit.tune.tuning import study_status

        return _print_result(study_status(args.status, args.storage), None)
    if not args.config:
        raise ValueError(
            "dmlkit tune needs a CONFIG file (e.g. configs/quickstart.yaml), --status STUDY_DIR or --list-spaces"
        )
    from dmlkit.tune import SearchSettings, tune

    settings = SearchSettings(
        sampler=args.sampler,
        seed=args.seed,
        startup_trials=args.startup_trials,
        pruner=args.pruner,
        heartbeat=args.heartbeat,
    )
    result = tune(
        args.config,
        space=args.space or None,
        trials=args.trials,
        out=args.out,
        overrides=args.overrides,
        protocol=args.protocol,
        folds=args.folds,
        settings=settings,
        jobs=args.jobs,
        storage=args.storage,
        study_name=args.study_name,
        quiet=args.quiet,
        test_seeds=args.test_seeds,
    )
    return _print_result(result, args.test_seeds)


def _print_result(result: Any, test_seeds: Any) -> int:
    print((result.study_dir / "trials.md").read_text(), end="")
    if result.best is None:
        print(f"study {result.study_dir}: no trial completed yet")
        return 0
    best = result.best
    sem = "" if best["sem"] is None else f" ± {100 * best['sem']:.2f} (SEM over folds)"
    print(
        f"best: trial {best['trial']}, validation {best['metric']} {100 * best['value']:.2f}{sem}; "
        f"values {json.dumps(best['params'])}"
    )
    if (result.study_dir / "test.md").is_file() and test_seeds is not None:
        print((result.study_dir / "test.md").read_text(), end="")
    print(
        f"study folder: {result.study_dir}  (best.yaml trains the best values: dmlkit train {result.study_dir / 'best.yaml'})"
    )
    return 0


COMMANDS = {
    "tune": (
        "search hyperparameters of a config with Optuna (resumable; many workers; PostgreSQL for many machines)",
        _tune_arguments,
        _cmd_tune,
    ),
}
