"""``dmlkit bench``: the benchmarks of a source checkout (the lab's ``dmlkit study`` is ``dmlkit_lab.commands``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["BENCHMARKS", "COMMANDS"]

# Benchmarks: name -> module of the top-level ``benchmarks/`` folder of a source checkout (``dmlkit bench NAME ARGS``).
BENCHMARKS = {
    name: f"benchmarks.{name}"
    for name in (
        "retrieval",
        "retrieval_large",
        "retrieval_sharded",
        "retrieval_tradeoff",
        "clustering_large",
        "fastap",
        "miner",
        "triplet",
        "sft",
        "ccp",
        "gsp",
        "data",
        "search",
        "ddp",
        "train",
        "tune",
        "device_check",
    )
}


def _bench_arguments(bench: argparse.ArgumentParser) -> None:
    bench.description = f"benchmarks: {', '.join(BENCHMARKS)}"
    bench.add_argument("name", choices=sorted(BENCHMARKS))
    bench.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the benchmark")


def _cmd_bench(args: argparse.Namespace) -> int:
    import importlib

    import dmlkit

    root = Path(dmlkit.__file__).resolve().parents[2]  # src/dmlkit/__init__.py -> the checkout of an editable install
    if not (root / "benchmarks" / "__init__.py").is_file() or not (root / "src" / "dmlkit").is_dir():
        print(
            "dmlkit bench: benchmarks run from a source checkout of dmlkit (its top-level benchmarks/ folder), "
            "which this installation does not have; clone the repository, `pip install -e .` there and run "
            f"`dmlkit bench {args.name}` (or `python -m benchmarks.{args.name}`) in it",
            file=sys.stderr,
        )
        return 2
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    module = importlib.import_module(BENCHMARKS[args.name])
    return module.main(args.args) or 0


COMMANDS = {
    "bench": ("run a benchmark", _bench_arguments, _cmd_bench),
}
