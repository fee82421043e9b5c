"""The lab's commands, declared as ``dmlkit.commands`` entry points: ``dmlkit study`` (the controlled studies).

Each is a ``(help, add_arguments, run, after)`` tuple; ``after`` names the library command it is listed after
in ``dmlkit --help`` (``dmlkit.cli.all_commands``). Heavy imports happen inside the commands, so that
``dmlkit --help`` answers at once.
"""

from __future__ import annotations

import argparse
import importlib

__all__ = ["STUDIES", "STUDY"]

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
