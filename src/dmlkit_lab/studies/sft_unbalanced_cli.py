"""The command line of the SFT unbalanced-training study: ``dmlkit study sft-unbalanced``.

Arguments to an ``UnbalancedStudyConfig`` (the defaults, or the testbed preset with ``--testbed``), then
``dmlkit_lab.studies.sft_unbalanced.run_study``; prints the written ``table.md``.

Run: ``dmlkit study sft-unbalanced --out DIR`` or ``python -m dmlkit_lab.studies.sft_unbalanced_cli --out DIR``.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Sequence

from dmlkit_lab.studies import sft_unbalanced
from dmlkit_lab.studies.sft_unbalanced_config import UnbalancedStudyConfig

__all__ = ["config_from_args", "main", "parser"]

# Options that set the config field of the same name (``--batch-size`` -> ``batch_size``); None: the default.
_CONFIG_OPTIONS = (
    ("--steps", int, None),
    ("--batch-size", int, None),
    ("--lr", float, "learning rate of the new layers"),
    ("--backbone-lr", float, "learning rate of the backbone (default: --lr)"),
    ("--classifier-lr", float, "learning rate of the classifier loss's weights (default: --lr)"),
    ("--weight-decay", float, None),
    ("--loss", str, "classifier loss of the registry (l2_softmax, normalized_softmax, cosface)"),
    ("--lam", float, "weight of the generated term (Eq. 10)"),
    ("--num-head", int, None),
    ("--num-tail", int, None),
    ("--head-train", int, None),
    ("--tail-train", int, None),
    ("--min-images", int, None),
    ("--tail-threshold", int, None),
    ("--image-size", int, None),
    ("--embedding-dim", int, None),
    ("--pretrained", str, "a pretrained-backbone name or weights file"),
    ("--transform", str, "sft (Eq. 3-4) or translation (Eq. 2, the control)"),
    ("--sampling", str, "uniform (natural class frequencies) or class_balanced (re-sampling control)"),
)


def parser() -> argparse.ArgumentParser:
    """The study's argument parser."""
    out = argparse.ArgumentParser(
        prog="dmlkit study sft-unbalanced", description=(sft_unbalanced.__doc__ or "").splitlines()[0]
    )
    out.add_argument("--out", required=True, help="folder for table.md and results.json")
    out.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    out.add_argument(
        "--testbed",
        action="store_true",
        help="the testbed preset: pretrained glyphs-resnet20 fine-tuned on the DML classes of "
        "glyphs_testbed (UnbalancedStudyConfig.testbed); the options below still override it",
    )
    for flag, kind, text in _CONFIG_OPTIONS:
        out.add_argument(flag, type=kind, default=None, help=text)
    out.add_argument("--no-augment", action="store_true", help="no image augmentation of training images")
    out.add_argument("--methods", nargs="+", default=list(sft_unbalanced.METHODS), choices=sft_unbalanced.METHODS)
    out.add_argument("--quiet", action="store_true")
    return out


def config_from_args(args: argparse.Namespace) -> UnbalancedStudyConfig:
    """The config of the parsed arguments: the options given, over the defaults or the testbed preset."""
    fields = {f.name for f in dataclasses.fields(UnbalancedStudyConfig)}
    given = {key: value for key, value in vars(args).items() if key in fields and value is not None}
    if args.no_augment:
        given["augment"] = False
    return UnbalancedStudyConfig.testbed(**given) if args.testbed else UnbalancedStudyConfig(**given)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    sft_unbalanced.run_study(config_from_args(args), args.out, args.seeds, args.methods, quiet=args.quiet)
    print((Path(args.out) / "table.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
