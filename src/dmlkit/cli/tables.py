"""``dmlkit protocol``, ``sweep``, ``report``, ``gallery`` and ``tensorboard``: runs compared and shown (the lab's
``geometry`` is ``dmlkit_lab.commands``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from dmlkit.cli.options import add_columns, add_jobs, add_overrides, add_seeds

__all__ = ["COMMANDS"]


def _protocol_arguments(protocol: argparse.ArgumentParser) -> None:
    protocol.add_argument("name", choices=["conventional", "holdout", "fair"])
    protocol.add_argument("configs", nargs="+", help="experiment YAML files, one table row each")
    add_seeds(protocol, [0, 1, 2], "seeds (default: 0 1 2)")
    protocol.add_argument("--out", required=True, help="folder for the runs, results.md and results.json")
    add_overrides(protocol, "override applied to every config (repeatable)")
    add_columns(protocol)
    protocol.add_argument("--folds", type=int, default=4, help="folds of the fair protocol (default: 4)")
    add_jobs(protocol)
    protocol.add_argument(
        "--baseline",
        dest="baselines",
        nargs="+",
        default=[],
        metavar="NAME",
        help="config name(s) of baselines: adds a table of per-seed paired differences, each run "
        "against the baseline whose name is the longest prefix of its own; RUN=BASELINE "
        "pairs a run explicitly (e.g. ccp=ms_validated)",
    )
    protocol.add_argument(
        "--backbones",
        nargs="+",
        default=[],
        metavar="NAME|FILE",
        help="pretrained backbones (e.g. glyphs-resnet20 glyphs-resnet20@seed1 glyphs-resnet20@seed2), "
        "or weights files (labelled by their file name without the suffix, e.g. a cache entry "
        "built on another machine): every config x seed runs on each; the paired table is "
        "pooled over them",
    )


def _sweep_arguments(sweep: argparse.ArgumentParser) -> None:
    sweep.add_argument("name", choices=["conventional", "holdout"], help="single-model protocol of every run")
    sweep.add_argument("configs", nargs="+", help="experiment YAML files, each swept over the grid")
    sweep.add_argument(
        "--grid",
        action="append",
        required=True,
        metavar="KEY.PATH=V1,V2,...",
        help="a swept key and its values, e.g. --grid methods.ccp.pool_size=4,6,8 (repeatable: the product)",
    )
    add_seeds(sweep, [0], "seeds (default: 0)")
    sweep.add_argument("--out", required=True, help="folder for the runs, results.md, results.json and sweep.png")
    add_overrides(sweep, "override applied to every run (repeatable)")
    add_columns(sweep)
    sweep.add_argument("--metric", default="mean_average_precision_at_r", help="metric of the figure (default: MAP@R)")
    add_jobs(sweep)


def _report_arguments(report: argparse.ArgumentParser) -> None:
    report.add_argument(
        "runs",
        nargs="+",
        metavar="RUN_DIR",
        help="finished run folders (seeds of one config are grouped), or study folders of dmlkit tune",
    )
    report.add_argument("--out", default="report.html", help="HTML file to write (default: report.html)")
    report.add_argument("--title", default=None, help="page title (default: the run names)")
    report.add_argument(
        "--gallery",
        action="store_true",
        help="draw the nearest-neighbour gallery of runs without plots/nearest_neighbours.png",
    )


def _gallery_arguments(gallery: argparse.ArgumentParser) -> None:
    gallery.add_argument("run", metavar="RUN_DIR", help="a finished run folder")
    gallery.add_argument("--out", default=None, help="PNG to write (default: RUN_DIR/plots/nearest_neighbours.png)")
    gallery.add_argument("--queries", type=int, default=8, help="number of query images (default: 8)")
    gallery.add_argument("--k", type=int, default=5, help="neighbours per query (default: 5)")
    gallery.add_argument("--seed", type=int, default=0, help="seed of the choice of queries (default: 0)")
    gallery.add_argument("--split", default="test", help="dataset split to search (default: test)")


def _tensorboard_arguments(tensorboard: argparse.ArgumentParser) -> None:
    tensorboard.add_argument("run", metavar="RUN_DIR", help="a finished run folder")
    tensorboard.add_argument("--split", default="test", help="dataset split to embed (default: test)")
    tensorboard.add_argument(
        "--max-images",
        type=int,
        default=2000,
        metavar="N",
        help="embed at most N images of the split, drawn with the run's seed (default: 2000)",
    )


def _cmd_protocol(args: argparse.Namespace) -> int:
    from dmlkit.protocols import run_protocol

    table = run_protocol(
        args.name,
        args.configs,
        args.out,
        seeds=args.seeds,
        overrides=args.overrides,
        columns=args.columns,
        folds=args.folds,
        jobs=args.jobs,
        reuse=args.reuse_only,
        baselines=args.baselines,
        backbones=args.backbones,
    )
    print(table)
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from dmlkit.protocols.sweep import parse_grid, run_sweep

    table = run_sweep(
        args.name,
        args.configs,
        parse_grid(args.grid),
        args.out,
        seeds=args.seeds,
        overrides=args.overrides,
        columns=args.columns,
        metric=args.metric,
        jobs=args.jobs,
        reuse=args.reuse_only,
    )
    print(table)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from dmlkit.report import build_report

    print(f"report: {build_report(args.runs, args.out, title=args.title, gallery=args.gallery)}")
    return 0


def _cmd_gallery(args: argparse.Namespace) -> int:
    from dmlkit.report.gallery import GALLERY_FILE, run_gallery

    correct = run_gallery(args.run, args.out, queries=args.queries, k=args.k, seed=args.seed, split=args.split)
    out = args.out or Path(args.run) / "plots" / GALLERY_FILE
    print(f"gallery: {out} ({int(correct.sum())} of {correct.numel()} neighbours share their query's class)")
    return 0


def _cmd_tensorboard(args: argparse.Namespace) -> int:
    import shlex

    from dmlkit.report.projector import write_projector

    written = write_projector(args.run, split=args.split, max_images=args.max_images)
    print(
        f"projector: {written.folder} ({written.images} {args.split} images, {written.dim} dimensions, "
        f"{written.checkpoint.name})"
    )
    print(f"tensorboard --logdir {shlex.quote(str(written.folder.parent))}")
    return 0


COMMANDS = {
    "protocol": (
        "run a protocol (conventional, holdout, fair) for configs over seeds and write a results table",
        _protocol_arguments,
        _cmd_protocol,
    ),
    "sweep": (
        "train configs over a grid of overrides and seeds; write a table and a line / heat-map figure",
        _sweep_arguments,
        _cmd_sweep,
    ),
    "report": ("write a self-contained HTML page comparing run folders", _report_arguments, _cmd_report),
    "gallery": (
        "draw test queries with their nearest neighbours (green: same class)",
        _gallery_arguments,
        _cmd_gallery,
    ),
    "tensorboard": (
        "write a run's embeddings of a split, with labels and images, for TensorBoard's projector",
        _tensorboard_arguments,
        _cmd_tensorboard,
    ),
}
