"""``run_protocol``: one protocol, several configs, several seeds -> ``results.md`` and ``results.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from dmlkit.config import load_config
from dmlkit.protocols.conventional import PROTOCOL_OVERRIDES, run_single_model
from dmlkit.protocols.fair import run_fair
from dmlkit.protocols.table import check_columns, markdown_table, summarise

PROTOCOLS = (*PROTOCOL_OVERRIDES, "fair")
TIME_COLUMN = [("s/step", "seconds_per_step")]


def run_protocol(
    protocol: str,
    configs: Sequence[str | Path],
    out_dir: str | Path,
    seeds: Sequence[int] = (0, 1, 2),
    overrides: Sequence[str] = (),
    columns: str = "thesis",
    folds: int = 4,
    quiet: bool = True,
) -> str:
    """Run ``protocol`` for each config over ``seeds``; write and return the markdown table.

    Runs go to ``out_dir/<name>-seed<s>[-fold<k>]`` and are reused when the
    command is run again, so a stopped table resumes where it was.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol '{protocol}'; valid: {', '.join(PROTOCOLS)}")
    if not configs:
        raise ValueError("run_protocol needs at least one config file")
    if not seeds:
        raise ValueError("run_protocol needs at least one seed")
    check_columns(columns)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, dict[str, Any]]] = []
    raw: dict[str, Any] = {}
    for path in configs:
        name = load_config(path, list(overrides)).name
        if protocol == "fair":
            result = run_fair(path, overrides, seeds, out, folds=folds, quiet=quiet)
            for part, label in (("separated", "separated"), ("concatenated", "concatenated")):
                rows.append((f"{name} ({label})", summarise(result[part])))
            raw[name] = result
        else:
            per_seed = run_single_model(protocol, path, overrides, seeds, out, quiet=quiet)
            rows.append((name, summarise(per_seed)))
            raw[name] = per_seed
    title = f"{protocol} protocol, seeds {', '.join(map(str, seeds))} (mean ± std, metrics in %)\n\n"
    table = title + markdown_table(rows, columns, extra=TIME_COLUMN)
    (out / "results.md").write_text(table)
    (out / "results.json").write_text(json.dumps({"protocol": protocol, "seeds": list(seeds), "runs": raw}, indent=2) + "\n")
    return table
