"""``run_protocol``: one protocol, several configs, several seeds -> ``results.md`` and ``results.json``."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any, Sequence

from dmlkit.config import load_config
from dmlkit.protocols.conventional import PROTOCOL_OVERRIDES, run_single_model
from dmlkit.protocols.fair import run_fair
from dmlkit.protocols.runs import Obtain, check_batch_arguments, gather_runs
from dmlkit.protocols.table import markdown_table, summarise

PROTOCOLS = (*PROTOCOL_OVERRIDES, "fair")
TIME_COLUMN = [("s/step", "seconds_per_step")]


def _collect(protocol: str, configs: Sequence[str | Path], out: Path, seeds: Sequence[int], overrides: Sequence[str],
             folds: int, obtain: Obtain) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]]:
    rows: list[tuple[str, dict[str, Any]]] = []
    raw: dict[str, Any] = {}
    for path in configs:
        name = load_config(path, list(overrides)).name
        if protocol == "fair":
            result = run_fair(path, overrides, seeds, out, obtain, folds=folds)
            for part in ("separated", "concatenated"):
                rows.append((f"{name} ({part}, n={len(result[part])})", summarise(result[part])))
            raw[name] = result
        else:
            per_seed = run_single_model(protocol, path, overrides, seeds, out, obtain)
            rows.append((f"{name} (n={len(per_seed)})", summarise(per_seed)))
            raw[name] = per_seed
    return rows, raw


def run_protocol(
    protocol: str,
    configs: Sequence[str | Path],
    out_dir: str | Path,
    seeds: Sequence[int] = (0, 1, 2),
    overrides: Sequence[str] = (),
    columns: str = "thesis",
    folds: int = 4,
    quiet: bool = True,
    jobs: int = 1,
    reuse: bool = False,
) -> str:
    """Run ``protocol`` for each config over ``seeds``; write and return the markdown table.

    Runs go to ``out_dir/<name>-seed<s>[-fold<k>]`` and are reused when the
    command is run again, so a stopped table resumes where it was. ``jobs > 1``
    trains the missing runs in that many processes first; ``reuse=True`` trains
    nothing and reports the finished runs only (``n=`` in each row says how many seeds).
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol '{protocol}'; valid: {', '.join(PROTOCOLS)}")
    check_batch_arguments("run_protocol", configs, seeds, columns)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    collect = partial(_collect, protocol, configs, out, seeds, overrides, folds)
    (rows, raw), errors = gather_runs(collect, jobs=jobs, reuse=reuse, quiet=quiet)
    title = f"{protocol} protocol, seeds {', '.join(map(str, seeds))} (mean ± std over the n seeds done, metrics in %)\n\n"
    table = title + markdown_table(rows, columns, extra=TIME_COLUMN)
    (out / "results.md").write_text(table)
    (out / "results.json").write_text(json.dumps({"protocol": protocol, "seeds": list(seeds), "runs": raw}, indent=2) + "\n")
    if errors:
        raise RuntimeError(f"{len(errors)} run(s) failed; the table holds the others:\n" + "\n".join(errors))
    return table
