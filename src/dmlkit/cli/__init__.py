"""The ``dmlkit`` command: one table of sub-commands, each an ``(help, add_arguments, run)`` entry of its module.

- ``training``: ``train`` (a config into a run folder), ``pretrain`` (a named backbone), ``floors`` (scores
  before training), ``evaluate`` (a run's checkpoint on a split);
- ``tables``: ``protocol`` (configs x seeds [x backbones] -> tables), ``sweep`` (a grid of overrides),
  ``report`` (HTML page of runs), ``gallery`` (queries and neighbours), ``tensorboard`` (the embedding projector);
- ``tune``: ``tune`` (a hyperparameter study on Optuna);
- ``data``: ``data list`` / ``data prepare`` / ``data draws``;
- ``search``: ``embed``, ``index build``, ``search``, ``export``, ``serve``;
- ``tools``: ``bench`` (benchmarks of a source checkout).

Installed packages add commands as entry points of the group ``dmlkit.commands`` (``COMMAND_GROUP``): each names
an ``(help, add_arguments, run)`` tuple, optionally with a fourth item, the command it is listed after in
``dmlkit --help`` (else it comes last). The lab's ``study`` and ``geometry`` come this way (``dmlkit_lab.commands``),
so the library names no lab module. Options several commands share are written once in ``options``. Heavy imports (torch, Lightning) happen
inside the commands so that ``dmlkit --help`` answers at once. ``ValueError`` and ``FileNotFoundError`` end
a command with its message and exit code 2, a non-finite run with 3.
"""

from __future__ import annotations

import argparse
import functools
import sys
import warnings
from typing import Any, Callable

from dmlkit.cli import data, search, tables, tools, training, tune
from dmlkit.cli.tools import BENCHMARKS
from dmlkit.cli.training import print_summary
from dmlkit.interrupts import RunsInterrupted, StudyInterrupted

__all__ = ["BENCHMARKS", "COMMANDS", "COMMAND_GROUP", "ORDER", "all_commands", "main", "print_summary"]

Command = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
COMMAND_GROUP = "dmlkit.commands"

#: The order ``dmlkit --help`` lists the commands in: from a config to a run, then looking at runs, then serving.
ORDER = (
    "train",
    "pretrain",
    "floors",
    "evaluate",
    "protocol",
    "sweep",
    "tune",
    "data",
    "report",
    "gallery",
    "tensorboard",
    "embed",
    "index",
    "search",
    "export",
    "serve",
    "bench",
)


def _in_order(*modules: Any) -> dict[str, Command]:
    found = {name: entry for module in modules for name, entry in module.COMMANDS.items()}
    if sorted(found) != sorted(ORDER):
        raise RuntimeError(f"dmlkit.cli.ORDER must list every command once: {sorted(found)} vs {sorted(ORDER)}")
    return {name: found[name] for name in ORDER}


#: Every sub-command in the order ``dmlkit --help`` lists them.
COMMANDS: dict[str, Command] = _in_order(training, tables, tune, data, search, tools)


@functools.cache
def all_commands() -> dict[str, Command]:
    """``COMMANDS`` with the commands of installed packages (``dmlkit.commands`` entry points) in their places."""
    from importlib.metadata import entry_points

    names = list(COMMANDS)
    found: dict[str, Command] = dict(COMMANDS)
    for point in entry_points(group=COMMAND_GROUP):
        try:
            entry = tuple(point.load())
        except Exception as err:
            warnings.warn(
                f"the dmlkit command '{point.name}' ({point.value}) of an installed package failed to load "
                f"({type(err).__name__}: {err}); fix or uninstall that package",
                stacklevel=2,
            )
            continue
        if point.name in found or len(entry) not in (3, 4):
            raise ValueError(
                f"the dmlkit command '{point.name}' ({point.value}) is defined twice or is not a "
                "(help, add_arguments, run[, after]) tuple"
            )
        found[point.name] = entry[:3]
        after = entry[3] if len(entry) == 4 else None
        names.insert(names.index(after) + 1 if after in names else len(names), point.name)
    return {name: found[name] for name in names}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dmlkit", description="Deep metric learning: train, evaluate, benchmark.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add_arguments, _) in all_commands().items():
        add_arguments(sub.add_parser(name, help=help_text))
    return parser


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
        return all_commands()[args.command][2](args)
    except (ValueError, FileNotFoundError) as err:
        print(f"dmlkit {args.command}: error: {err}", file=sys.stderr)
        return 2
    except (RunsInterrupted, StudyInterrupted) as stop:  # SIGTERM / SIGINT during parallel runs: checkpoints written
        print(f"dmlkit {args.command}: {stop}", file=sys.stderr)
        return stop.exit_code
    except RuntimeError as err:
        from dmlkit.engine.trainer import NonFiniteError

        if isinstance(err, NonFiniteError):
            print(f"dmlkit {args.command}: error: {err}", file=sys.stderr)
            return 3
        from dmlkit.engine.checkpoint import CheckpointWriteError
        from dmlkit.engine.peers import PeerProcessLost

        if isinstance(err, (PeerProcessLost, CheckpointWriteError)):
            print(f"dmlkit {args.command}: error: {err}", file=sys.stderr)
            return 4
        raise


if __name__ == "__main__":
    sys.exit(main())
