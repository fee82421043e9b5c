"""``dmlkit data``: list the datasets, prepare one, or count a sampler's draws per category."""

from __future__ import annotations

import argparse

from dmlkit.cli.options import add_overrides

__all__ = ["COMMANDS"]


def _data_arguments(data: argparse.ArgumentParser) -> None:
    data_sub = data.add_subparsers(dest="data_command", required=True)
    data_sub.add_parser("list", help="the registered datasets: splits, published size, what this machine holds, source")
    prepare = data_sub.add_parser("prepare", help="download / render and cache a dataset")
    prepare.add_argument("name", help="a dataset of `dmlkit data list`")
    prepare.add_argument(
        "--root", default=None, help="the folder holding (or to receive) its files; default: the dataset's cache folder"
    )
    draws = data_sub.add_parser(
        "draws", help="how often the config's batch sampler draws each category's images, against its share of them"
    )
    draws.add_argument("config", help="experiment YAML; its training split and train.sampler are used")
    draws.add_argument("--batches", type=int, default=1000, help="batches to draw (default: 1000)")
    add_overrides(draws, "override a config value (repeatable)")


def _cmd_data(args: argparse.Namespace) -> int:
    from dmlkit.data import prepare_dataset

    if args.data_command == "list":
        from dmlkit.data.catalog import dataset_table

        print(dataset_table())
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
    rows = category_draws(
        build_sampler(cfg, train), train.labels, train.class_categories, args.batches, train.category_names
    )
    print(f"{cfg.name}: sampler {cfg.train.sampler}, {args.batches} batches of {cfg.train.batch_size}")
    print(format_category_draws(rows))
    return 0


COMMANDS = {"data": ("list or prepare datasets", _data_arguments, _cmd_data)}
