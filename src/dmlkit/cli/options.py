"""Options that several commands share, written once: ``--set``, ``--quiet``, ``--seeds``, ``--columns``,
``--jobs`` and ``--reuse-only``."""

from __future__ import annotations

import argparse

__all__ = ["add_columns", "add_jobs", "add_overrides", "add_quiet", "add_seeds"]


def add_overrides(
    parser: argparse.ArgumentParser, help: str = "override a config value, e.g. --set train.lr=1e-4 (repeatable)"
) -> None:
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE", help=help)


def add_quiet(parser: argparse.ArgumentParser, help: str = "no progress output") -> None:
    parser.add_argument("--quiet", action="store_true", help=help)


def add_seeds(parser: argparse.ArgumentParser, default: list[int], help: str) -> None:
    parser.add_argument("--seeds", type=int, nargs="+", default=default, help=help)


def add_columns(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--columns", default="thesis", help="column set: thesis (P@1, MAP@R), sft (R@K, NMI, F1), all")


def add_jobs(parser: argparse.ArgumentParser) -> None:
    """``--jobs`` and ``--reuse-only`` of the commands that train batches of runs."""
    parser.add_argument(
        "--jobs", type=int, default=1, help="train the missing runs in this many processes (default: 1)"
    )
    parser.add_argument("--reuse-only", action="store_true", help="train nothing; tabulate the finished runs")
