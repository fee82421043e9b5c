"""The ``dmlkit`` command: train, evaluate, data, bench.

Heavy imports (torch, Lightning) happen inside the sub-commands so that
``dmlkit --help`` answers at once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from dmlkit.interrupts import RunsInterrupted

# Benchmarks: name -> module of the top-level ``benchmarks/`` folder of a source checkout (``dmlkit bench NAME ARGS``).
BENCHMARKS = {
    name: f"benchmarks.{name}"
    for name in ("retrieval", "retrieval_large", "retrieval_sharded", "retrieval_tradeoff", "clustering_large", "fastap", "sft", "ccp", "gsp", "data", "search", "ddp", "train")
}

# Controlled studies: name -> module with main(argv) -> int (``dmlkit study NAME ARGS``).
STUDIES = {
    "sft-unbalanced": "dmlkit.studies.sft_unbalanced",
    "gsp-synthetic": "dmlkit.studies.gsp_synthetic",
    "collage": "dmlkit.studies.collage",
    "pcc": "dmlkit.studies.pcc",
    "gsp-zero-shot": "dmlkit.studies.gsp_zero_shot",
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
    train.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                       help="a module or .py file registering your own components (added to the config's imports; "
                            "repeatable)")

    pretrain = sub.add_parser("pretrain", help="build (once) the pretrained backbone a config names in model.pretrained")
    pretrain.add_argument("target", help="a config whose model.pretrained names a backbone, or that name (glyphs-resnet20, "
                                          "glyphs-resnet20@seed1: another pretraining seed)")
    pretrain.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                          help="override a value of the config (repeatable)")
    pretrain.add_argument("--force", action="store_true", help="train it again even if a valid cached copy exists")
    pretrain.add_argument("--quiet", action="store_true", help="no progress output")

    floors = sub.add_parser("floors", help="scores of a split before any training: raw pixels, the untrained model "
                                           "(and the pretrained backbone, not fine-tuned): a table's floor rows")
    floors.add_argument("config", help="experiment YAML whose data, model and eval sections are used")
    floors.add_argument("--split", default=None, help="split to score (default: the config's eval.split)")
    floors.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds of the random weights (default: 0)")
    floors.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a config value (repeatable)")
    floors.add_argument("--columns", default="thesis", help="column set: thesis (P@1, MAP@R), sft (R@K, NMI, F1), all")
    floors.add_argument("--out", default=None, help="also write the table (markdown) and floors.json beside it")

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
    protocol.add_argument("--baseline", dest="baselines", nargs="+", default=[], metavar="NAME",
                          help="config name(s) of baselines: adds a table of per-seed paired differences, each run "
                               "against the baseline whose name is the longest prefix of its own")
    protocol.add_argument("--backbones", nargs="+", default=[], metavar="NAME",
                          help="pretrained backbones (e.g. glyphs-resnet20 glyphs-resnet20@seed1 glyphs-resnet20@seed2): "
                               "every config x seed runs on each; the paired table is pooled over them")

    sweep = sub.add_parser(
        "sweep", help="train configs over a grid of overrides and seeds; write a table and a line / heat-map figure"
    )
    sweep.add_argument("name", choices=["conventional", "holdout"], help="single-model protocol of every run")
    sweep.add_argument("configs", nargs="+", help="experiment YAML files, each swept over the grid")
    sweep.add_argument("--grid", action="append", required=True, metavar="KEY.PATH=V1,V2,...",
                       help="a swept key and its values, e.g. --grid ccp.pool_size=4,6,8 (repeatable: the product)")
    sweep.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds (default: 0)")
    sweep.add_argument("--out", required=True, help="folder for the runs, results.md, results.json and sweep.png")
    sweep.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                       help="override applied to every run (repeatable)")
    sweep.add_argument("--columns", default="thesis", help="column set: thesis (P@1, MAP@R), sft (R@K, NMI, F1), all")
    sweep.add_argument("--metric", default="mean_average_precision_at_r", help="metric of the figure (default: MAP@R)")
    sweep.add_argument("--jobs", type=int, default=1, help="train the missing runs in this many processes (default: 1)")
    sweep.add_argument("--reuse-only", action="store_true", help="train nothing; tabulate the finished runs")

    data = sub.add_parser("data", help="list or prepare datasets")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    data_sub.add_parser("list", help="list the registered datasets")
    prepare = data_sub.add_parser("prepare", help="download / render and cache a dataset")
    prepare.add_argument("name", help="a dataset of `dmlkit data list`")
    prepare.add_argument("--root", default=None, help="the folder holding (or to receive) its files; default: the dataset's cache folder")
    draws = data_sub.add_parser(
        "draws", help="how often the config's batch sampler draws each category's images, against its share of them"
    )
    draws.add_argument("config", help="experiment YAML; its training split and train.sampler are used")
    draws.add_argument("--batches", type=int, default=1000, help="batches to draw (default: 1000)")
    draws.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE")

    report = sub.add_parser("report", help="write a self-contained HTML page comparing run folders")
    report.add_argument("runs", nargs="+", metavar="RUN_DIR", help="finished run folders (seeds of one config are grouped)")
    report.add_argument("--out", default="report.html", help="HTML file to write (default: report.html)")
    report.add_argument("--title", default=None, help="page title (default: the run names)")
    report.add_argument("--gallery", action="store_true",
                        help="draw the nearest-neighbour gallery of runs without plots/nearest_neighbours.png")

    geometry = sub.add_parser("geometry", help="embedding geometry of run groups side by side: r_w (Eq. 8) and class "
                              "divergences sorted by the baseline's (SFT paper Fig. 4a), seeds paired")
    geometry.add_argument("runs", nargs="+", metavar="RUN_DIR", help="finished run folders (seeds of one config are grouped)")
    geometry.add_argument("--out", required=True, help="folder for geometry.json, geometry.md and the figures")
    geometry.add_argument("--baseline", default=None, help="group to pair the others with (config name; default: the first)")
    geometry.add_argument("--split", default="train", help="split to embed (default: train, the training classes, as Fig. 4a)")

    gallery = sub.add_parser("gallery", help="draw test queries with their nearest neighbours (green: same class)")
    gallery.add_argument("run", metavar="RUN_DIR", help="a finished run folder")
    gallery.add_argument("--out", default=None, help="PNG to write (default: RUN_DIR/plots/nearest_neighbours.png)")
    gallery.add_argument("--queries", type=int, default=8, help="number of query images (default: 8)")
    gallery.add_argument("--k", type=int, default=5, help="neighbours per query (default: 5)")
    gallery.add_argument("--seed", type=int, default=0, help="seed of the choice of queries (default: 0)")
    gallery.add_argument("--split", default="test", help="dataset split to search (default: test)")

    _add_search_parsers(sub)

    bench = sub.add_parser("bench", help="run a benchmark", description=f"benchmarks: {', '.join(BENCHMARKS)}")
    bench.add_argument("name", choices=sorted(BENCHMARKS))
    bench.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the benchmark")

    study = sub.add_parser("study", help="run a controlled study, write its table", description=f"studies: {', '.join(STUDIES)}")
    study.add_argument("name", choices=sorted(STUDIES))
    study.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the study (e.g. --out DIR)")
    return parser


def _add_search_parsers(sub: Any) -> None:
    """embed, index build, search, export, serve: from a trained run to search (dmlkit.search, dmlkit.serve)."""
    embed = sub.add_parser("embed", help="embed image files with a trained run (resumable)")
    embed.add_argument("run", help="a run folder (its best.pt) or a checkpoint inside one")
    embed.add_argument("--images", required=True, help="a folder of images (class = parent folder) or a list file")
    embed.add_argument("--out", default="embeddings.npy", help="embeddings .npy; paths/labels go to <stem>.meta.json")
    embed.add_argument("--batch-size", type=int, default=None, help="images per forward pass (default: eval.batch_size)")
    embed.add_argument("--chunk-size", type=int, default=4096, help="images per saved chunk (the unit of resume)")
    embed.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    embed.add_argument("--quiet", action="store_true", help="no progress bar")

    index = sub.add_parser("index", help="build a faiss search index")
    index_sub = index.add_subparsers(dest="index_command", required=True)
    build = index_sub.add_parser("build", help="index an embeddings .npy written by dmlkit embed")
    build.add_argument("embeddings", help="an embeddings.npy written by dmlkit embed (its .meta.json beside it)")
    build.add_argument("--out", required=True, help="index folder to write")
    mode = build.add_mutually_exclusive_group()
    mode.add_argument("--exact", action="store_true", help="brute force (default)")
    mode.add_argument("--ivf", nargs="?", const="auto", metavar="N",
                      help="IVF with N k-means cells (--ivf alone: chosen from the data's size, as the evaluation does)")
    mode.add_argument("--hnsw", nargs="?", const="auto", metavar="M", help="HNSW with M links per node (--hnsw alone: 32)")
    build.add_argument("--nprobe", type=int, default=None,
                       help="IVF cells visited per query (default: the fewest that reach recall@1 0.95 on the data)")
    build.add_argument("--ef-search", type=int, default=None,
                       help="HNSW candidates per query (default: the fewest that reach recall@1 0.95 on the data)")
    build.add_argument("--recall-k", type=int, default=10, help="k of the recall@k measured for IVF / HNSW")
    build.add_argument("--recall-sample", type=int, default=1000, help="queries of that measurement")

    search = sub.add_parser("search", help="query an index folder with an image or an embedding")
    search.add_argument("index_dir", help="an index folder written by dmlkit index build")
    query = search.add_mutually_exclusive_group(required=True)
    query.add_argument("--image", help="an image file, embedded with the index's run (or --run)")
    query.add_argument("--embedding", help="a .npy query embedding of shape (d,)")
    search.add_argument("--k", type=int, default=10)
    search.add_argument("--run", default=None, help="run folder that embeds --image (default: the index's run)")
    search.add_argument("--json", action="store_true", help="print JSON instead of a table")

    export = sub.add_parser("export", help="export a run's model to TorchScript or ONNX (parity-checked)")
    export.add_argument("run", help="a run folder or a checkpoint inside one")
    export.add_argument("--format", choices=["torchscript", "onnx"], default="torchscript")
    export.add_argument("--out", required=True, help="file to write (e.g. model.pt or model.onnx)")

    serve = sub.add_parser("serve", help="local web page + JSON API to search an index")
    serve.add_argument("index_dir", help="an index folder written by dmlkit index build")
    serve.add_argument("--run", default=None, help="run folder that embeds uploads (default: the index's run)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--max-upload-mb", type=float, default=5.0, help="largest accepted upload (default: 5)")


def _cmd_embed(args: argparse.Namespace) -> int:
    from dmlkit.search import embed_images

    r = embed_images(args.run, args.images, args.out, batch_size=args.batch_size, chunk_size=args.chunk_size,
                     num_workers=args.workers, quiet=args.quiet)
    print(f"{r.count} x {r.dim} embeddings -> {r.embeddings} (+ {r.meta.name}); "
          f"chunks computed {r.chunks_computed}, already done {r.chunks_skipped}")
    return 0


def _int_option(flag: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{flag} takes a positive integer or 'auto', got {value!r}") from None


def _cmd_index(args: argparse.Namespace) -> int:
    from dmlkit.search import IndexConfig, build_index_from_embeddings

    mode = "ivf" if args.ivf is not None else "hnsw" if args.hnsw is not None else "exact"
    nlist = None if args.ivf in (None, "auto") else _int_option("--ivf", args.ivf)
    m = 32 if args.hnsw in (None, "auto") else _int_option("--hnsw", args.hnsw)
    cfg = IndexConfig(mode, nlist=nlist, nprobe=args.nprobe, m=m, ef_search=args.ef_search)
    index = build_index_from_embeddings(args.embeddings, args.out, cfg, args.recall_k, args.recall_sample)
    print(f"index {index.describe()} -> {args.out}")
    return 0


def _cmd_search(args: argparse.Namespace) -> int:
    from dmlkit.search.query import print_neighbours, search_index_folder

    index, results = search_index_folder(args.index_dir, args.image, args.embedding, args.k, args.run)
    if args.json:
        print(json.dumps([n.to_dict() for n in results], indent=2))
    else:
        print_neighbours(index, results)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from dmlkit.search.export import export_run

    r = export_run(args.run, args.format, args.out)
    print(f"{r.format} model -> {r.path}; max |exported - eager| = {r.max_abs_diff:.2e} on batches {r.checked_batches}")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from dmlkit.serve.server import serve

    if not 0 < args.max_upload_mb < 2**20:  # also NaN
        raise ValueError(f"--max-upload-mb must be a positive number of MiB (e.g. 5), got {args.max_upload_mb:g}")
    serve(args.index_dir, args.run, args.host, args.port, max_upload_bytes=max(1, int(args.max_upload_mb * 2**20)))
    return 0


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
        imports = [f"imports={json.dumps([*load_config(args.config, args.overrides).imports, *args.imports])}"] if args.imports else []
        cfg = load_config(args.config, [*args.overrides, *imports])
        from dmlkit.pretrain import ensure_pretrained_for

        ensure_pretrained_for(cfg, quiet=args.quiet)  # a named pretrained backbone is built on first use
        from dmlkit.engine.run_folder import saved_config_folder

        run_dir = args.run_dir or saved_config_folder(args.config)  # a run's own config.yaml: that run's folder
        trainer = build_trainer(cfg, run_dir, quiet=args.quiet)
    from dmlkit.engine.signals import TrainingInterrupted

    try:
        summary = trainer.fit()
    except TrainingInterrupted as stop:  # SIGTERM / SIGINT: last.pt written, exit 143 / 130
        print(f"dmlkit train: {stop}", file=sys.stderr)
        return stop.exit_code
    if trainer.fabric.is_global_zero:
        print_summary(summary, trainer.folder.path, wall_seconds=time.monotonic() - started)
    return 0


def print_summary(summary: dict[str, Any], run_dir: Path, wall_seconds: float | None = None) -> None:
    """The test metrics of a finished run as a table, in percent as every printed table of dmlkit
    (``summary.json`` and the JSON of ``dmlkit evaluate`` keep fractions)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{summary['name']}: test metrics after {summary['steps']} steps (best step {summary['best_step']})")
    table.add_column("metric")
    table.add_column("%", justify="right")
    for key, value in summary["test"].items():
        table.add_row(key, f"{100 * value:.2f}")
    console = Console()
    console.print(table)
    wall = "" if wall_seconds is None else f"; wall time {wall_seconds:.0f} s with loading, evaluation and plots"
    console.print(f"run folder: {run_dir}  (train time {summary['train_seconds']:.0f} s{wall})")


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from dmlkit.assemble import evaluate_run

    metrics = evaluate_run(args.run, split=args.split)
    if os.environ.get("RANK", "0") != "0":  # under torchrun every process evaluates its shard; rank 0 reports
        return 0
    if args.diagnostics:
        from dmlkit.report.diagnostics import run_diagnostics

        metrics = {"metrics": metrics, "diagnostics": run_diagnostics(args.run, split=args.split)}
    print(json.dumps(metrics, indent=2))
    return 0


def _cmd_pretrain(args: argparse.Namespace) -> int:
    from dmlkit.assemble.pretrained import canonical_pretrained_name, is_pretrained_name, list_pretrained, read_pretrained
    from dmlkit.config import load_config
    from dmlkit.pretrain import ensure_pretrained, pretrained_name

    if is_pretrained_name(args.target) and not Path(args.target).is_file():
        name = canonical_pretrained_name(args.target)
    else:
        name = pretrained_name(load_config(args.target, args.overrides))
        if name is None:
            raise ValueError(f"'{args.target}' names no pretrained backbone in model.pretrained; valid names: "
                             f"{', '.join(list_pretrained())} (each also as <name>@seed<N>)")
    path = ensure_pretrained(name, quiet=args.quiet, force=args.force)
    summary = read_pretrained(name, path)["summary"]
    val = summary.get("best_val", {})
    print(f"pretrained backbone '{name}': {path}  (best step {summary.get('best_step')}, val "
          f"{val.get('metric')} {val.get('value', float('nan')):.4f}, train time {summary.get('train_seconds', 0):.0f} s)")
    return 0


def _cmd_floors(args: argparse.Namespace) -> int:
    from dmlkit.config import load_config
    from dmlkit.pretrain import ensure_pretrained_for
    from dmlkit.protocols.floors import floor_table

    cfg = load_config(args.config, args.overrides)
    ensure_pretrained_for(cfg)
    print(floor_table(cfg, split=args.split, seeds=args.seeds, columns=args.columns, out=args.out))
    return 0


def _cmd_protocol(args: argparse.Namespace) -> int:
    from dmlkit.protocols import run_protocol

    table = run_protocol(args.name, args.configs, args.out, seeds=args.seeds, overrides=args.overrides,
                         columns=args.columns, folds=args.folds, jobs=args.jobs, reuse=args.reuse_only,
                         baselines=args.baselines, backbones=args.backbones)
    print(table)
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from dmlkit.protocols.sweep import parse_grid, run_sweep

    table = run_sweep(args.name, args.configs, parse_grid(args.grid), args.out, seeds=args.seeds,
                      overrides=args.overrides, columns=args.columns, metric=args.metric, jobs=args.jobs,
                      reuse=args.reuse_only)
    print(table)
    return 0


def _cmd_data(args: argparse.Namespace) -> int:
    from dmlkit.data import list_datasets, prepare_dataset

    if args.data_command == "list":
        from dmlkit.data.catalog import DATASETS, dataset_splits

        for name in list_datasets():
            source = DATASETS.get(name).SOURCE.replace("NAME", name) or "(the class states no source)"
            print(f"{name:14s} splits: {', '.join(dataset_splits(name)):36s} {source}")
        return 0
    if args.data_command == "draws":
        return _data_draws(args)
    path = prepare_dataset(args.name, root=args.root)
    print(f"{args.name}: ready at {path}")
    return 0


def _data_draws(args: argparse.Namespace) -> int:
    from dmlkit.assemble.build import build_sampler, build_splits
    from dmlkit.config import load_config
    from dmlkit.data.samplers.draws import category_draws, format_category_draws

    cfg = load_config(args.config, args.overrides)
    train = build_splits(cfg).train
    rows = category_draws(build_sampler(cfg, train), train.labels, train.class_categories, args.batches,
                          train.category_names)
    print(f"{cfg.name}: sampler {cfg.train.sampler}, {args.batches} batches of {cfg.train.batch_size}")
    print(format_category_draws(rows))
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from dmlkit.report import build_report

    print(f"report: {build_report(args.runs, args.out, title=args.title, gallery=args.gallery)}")
    return 0


def _cmd_geometry(args: argparse.Namespace) -> int:
    from dmlkit.report.geometry_compare import compare_geometry

    compare_geometry(args.runs, args.out, baseline=args.baseline, split=args.split)
    print((Path(args.out) / "geometry.md").read_text(), end="")
    print(f"geometry: {args.out}")
    return 0


def _cmd_gallery(args: argparse.Namespace) -> int:
    from dmlkit.report.gallery import GALLERY_FILE, run_gallery

    correct = run_gallery(args.run, args.out, queries=args.queries, k=args.k, seed=args.seed, split=args.split)
    out = args.out or Path(args.run) / "plots" / GALLERY_FILE
    print(f"gallery: {out} ({int(correct.sum())} of {correct.numel()} neighbours share their query's class)")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    import importlib

    import dmlkit

    root = Path(dmlkit.__file__).resolve().parents[2]  # src/dmlkit/__init__.py -> the checkout of an editable install
    if not (root / "benchmarks" / "__init__.py").is_file() or not (root / "src" / "dmlkit").is_dir():
        print("dmlkit bench: benchmarks run from a source checkout of dmlkit (its top-level benchmarks/ folder), "
              "which this installation does not have; clone the repository, `pip install -e .` there and run "
              f"`dmlkit bench {args.name}` (or `python -m benchmarks.{args.name}`) in it", file=sys.stderr)
        return 2
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    module = importlib.import_module(BENCHMARKS[args.name])
    return module.main(args.args) or 0


def _cmd_study(args: argparse.Namespace) -> int:
    import importlib

    return importlib.import_module(STUDIES[args.name]).main(args.args) or 0


COMMANDS = {"train": _cmd_train, "evaluate": _cmd_evaluate, "data": _cmd_data, "protocol": _cmd_protocol, "bench": _cmd_bench,
            "report": _cmd_report, "gallery": _cmd_gallery}
COMMANDS.update(embed=_cmd_embed, index=_cmd_index, search=_cmd_search, export=_cmd_export, serve=_cmd_serve)
COMMANDS["study"] = _cmd_study
COMMANDS["sweep"] = _cmd_sweep
COMMANDS.update(pretrain=_cmd_pretrain, floors=_cmd_floors)
COMMANDS["geometry"] = _cmd_geometry


def _show_warning(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
    """dmlkit's own warnings as one ``dmlkit: warning: ...`` line; other packages' warnings as Python shows them."""
    if "/dmlkit/" in filename.replace("\\", "/"):
        print(f"dmlkit: warning: {message}", file=file or sys.stderr)
    else:
        (file or sys.stderr).write(warnings.formatwarning(message, category, filename, lineno, line))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        return COMMANDS[args.command](args)
    except (ValueError, FileNotFoundError) as err:
        print(f"dmlkit {args.command}: error: {err}", file=sys.stderr)
        return 2
    except RunsInterrupted as stop:  # SIGTERM / SIGINT during parallel runs: checkpoints written
        print(f"dmlkit {args.command}: {stop}", file=sys.stderr)
        return stop.exit_code
    except RuntimeError as err:
        from dmlkit.engine.trainer import NonFiniteError

        if isinstance(err, NonFiniteError):
            print(f"dmlkit {args.command}: error: {err}", file=sys.stderr)
            return 3
        raise


if __name__ == "__main__":
    sys.exit(main())
