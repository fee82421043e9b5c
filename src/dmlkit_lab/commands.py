"""The lab's commands, declared as ``dmlkit.commands`` entry points: ``dmlkit study`` (the controlled studies)
and ``dmlkit geometry`` (the SFT geometry of run groups side by side).

Each is a ``(help, add_arguments, run, after)`` tuple; ``after`` names the library command it is listed after
in ``dmlkit --help`` (``dmlkit.cli.all_commands``). Heavy imports happen inside the commands, so that
``dmlkit --help`` answers at once.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

__all__ = ["GEOMETRY", "STUDIES", "STUDY"]

# Controlled studies: name -> module with main(argv) -> int (``dmlkit study NAME ARGS``).
STUDIES = {
    "sft-unbalanced": "dmlkit_lab.studies.sft_unbalanced_cli",
    "gsp-synthetic": "dmlkit_lab.studies.gsp_synthetic_cli",
    "collage": "dmlkit_lab.studies.collage",
    "pcc": "dmlkit_lab.studies.pcc",
    "gsp-zero-shot": "dmlkit_lab.studies.gsp_zero_shot",
}


def _study_arguments(study: argparse.ArgumentParser) -> None:
    study.description = f"studies: {', '.join(STUDIES)}"
    study.add_argument("name", choices=sorted(STUDIES))
    study.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the study (e.g. --out DIR)")


def _cmd_study(args: argparse.Namespace) -> int:
    return importlib.import_module(STUDIES[args.name]).main(args.args) or 0


STUDY = ("run a controlled study, write its table", _study_arguments, _cmd_study, "bench")


def _geometry_arguments(geometry: argparse.ArgumentParser) -> None:
    geometry.add_argument(
        "runs", nargs="+", metavar="RUN_DIR", help="finished run folders (seeds of one config are grouped)"
    )
    geometry.add_argument("--out", required=True, help="folder for geometry.json, geometry.md and the figures")
    geometry.add_argument(
        "--baseline", default=None, help="group to pair the others with (config name; default: the first)"
    )
    geometry.add_argument(
        "--split", default="train", help="split to embed (default: train, the training classes, as Fig. 4a)"
    )


def _cmd_geometry(args: argparse.Namespace) -> int:
    from dmlkit_lab.report.geometry_compare import compare_geometry

    compare_geometry(args.runs, args.out, baseline=args.baseline, split=args.split)
    print((Path(args.out) / "geometry.md").read_text(), end="")
    print(f"geometry: {args.out}")
    return 0


GEOMETRY = (
    "embedding geometry of run groups side by side: r_w (Eq. 8) and class divergences sorted by the "
    "baseline's (SFT paper Fig. 4a), seeds paired",
    _geometry_arguments,
    _cmd_geometry,
    "report",
)
