"""The command-line reference ``docs/cli.md``, generated from the argparse parser of ``dmlkit.cli``.

``python -m dmlkit.cli_reference`` rewrites ``docs/cli.md``; ``--check`` only
compares (exit status 1 when the file is out of date). ``tests/test_docs.py``
runs the check, so the reference cannot drift from the code. The markdown is
built from the parser's actions (not from ``format_help``), so it does not
depend on the terminal width or on the Python version's help layout.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from dmlkit.cli import _parser

__all__ = ["DEFAULT_PATH", "cli_reference", "main"]

DEFAULT_PATH = Path("docs/cli.md")

HEADER = """# Command-line reference

Generated from the argument parsers in `src/dmlkit/cli/` by `python -m dmlkit.cli_reference`;
do not edit by hand (`tests/test_docs.py` fails when this page and the code disagree).
"""


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None and not action.option_strings:
        return "{" + ",".join(map(str, action.choices)) + "}"
    return action.dest if not action.option_strings else action.dest.upper()


def _value(action: argparse.Action) -> str:
    """How the value(s) of ``action`` are written on the command line (empty for a flag)."""
    if action.nargs == 0:
        return ""
    name = _metavar(action)
    if action.nargs == "?":
        return f"[{name}]"
    if action.nargs == "+":
        return f"{name} [{name} ...]"
    if action.nargs == "*":
        return f"[{name} ...]"
    if action.nargs == argparse.REMAINDER:
        return "..."
    if isinstance(action.nargs, int) and action.nargs > 1:
        return " ".join([name] * action.nargs)
    return name


def _usage(prog: str, parser: argparse.ArgumentParser) -> str:
    parts = [prog]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            parts.append("COMMAND ...")
        elif action.option_strings:
            text = " ".join(filter(None, [action.option_strings[0], _value(action)]))
            parts.append(text if action.required else f"[{text}]")
        else:
            parts.append(_value(action))
    return " ".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _arguments(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        name = ", ".join(action.option_strings) if action.option_strings else str(action.metavar or action.dest)
        value = _value(action) if action.option_strings else ""
        notes = []
        if action.choices is not None:
            notes.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
        if isinstance(action, argparse._AppendAction) and "repeatable" not in (action.help or ""):
            notes.append("repeatable")
        if action.required and action.option_strings:
            notes.append("required")
        if action.default not in (None, False, [], argparse.SUPPRESS) and "default" not in (action.help or ""):
            notes.append(f"default: `{action.default}`")
        description = "; ".join(filter(None, [action.help or "", *notes]))
        shown = f"`{name} {value}`" if value else f"`{name}`"
        rows.append(f"| {_cell(shown)} | {_cell(description)} |")
    if not rows:
        return []
    return ["| argument | description |", "|---|---|", *rows, ""]


def _section(prog: str, parser: argparse.ArgumentParser, summary: str | None, level: int) -> list[str]:
    lines = [f"{'#' * level} `{prog}`", ""]
    text = parser.description or summary
    if text:
        lines += [text[0].upper() + text[1:] + ("" if text.endswith(".") else "."), ""]
    lines += ["```", _usage(prog, parser), "```", ""]
    lines += _arguments(parser)
    sub = _subparsers(parser)
    if sub is not None:
        helps = {a.dest: a.help or "" for a in sub._choices_actions}
        lines += ["| command | what it does |", "|---|---|"]
        lines += [
            f"| [`{prog} {name}`](#{_anchor(f'{prog} {name}')}) | {_cell(helps.get(name, ''))} |"
            for name in sub.choices
        ]
        lines.append("")
        for name, child in sub.choices.items():
            lines += _section(f"{prog} {name}", child, helps.get(name), min(level + 1, 3))
    return lines


def _anchor(title: str) -> str:
    """The anchor GitHub gives a heading ``# `title` ``: lower case, spaces to dashes, punctuation dropped."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def cli_reference(parser: argparse.ArgumentParser | None = None) -> str:
    """The markdown reference of every command and option of ``parser`` (default: ``dmlkit``'s)."""
    parser = parser or _parser()
    return HEADER + "\n" + "\n".join(_section(parser.prog, parser, None, 2)).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = argparse.ArgumentParser(prog="python -m dmlkit.cli_reference", description=__doc__.split("\n")[0])
    args.add_argument("path", nargs="?", default=str(DEFAULT_PATH), help="markdown file (default: docs/cli.md)")
    args.add_argument("--check", action="store_true", help="only check that the file is up to date")
    ns = args.parse_args(argv)
    path, text = Path(ns.path), cli_reference()
    if ns.check:
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            print(f"{path} is out of date; regenerate it with: python -m dmlkit.cli_reference {path}", file=sys.stderr)
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
