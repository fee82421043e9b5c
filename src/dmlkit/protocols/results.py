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
from dmlkit.protocols.paired import assign_baselines, paired_difference, paired_table
from dmlkit.protocols.table import check_columns, markdown_table, summarise

PROTOCOLS = (*PROTOCOL_OVERRIDES, "fair")
TIME_COLUMN = [("steps", "steps", 0), ("best step", "best_step", 0), ("train s", "train_seconds", 0),
               ("s/step", "seconds_per_step", 2)]


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


def _paired(raw: dict[str, Any], pairs: dict[str, str], protocol: str, columns: str) -> tuple[str, dict[str, Any]]:
    """The paired-difference table (markdown) and its JSON form for ``{run: baseline}``."""
    keys = [key for _, key in check_columns(columns)]
    rows, out = [], {}
    parts = ("separated", "concatenated") if protocol == "fair" else (None,)
    for run, base in pairs.items():
        for part in parts:
            method, reference = (raw[run], raw[base]) if part is None else (raw[run][part], raw[base][part])
            result = paired_difference(method, reference, keys)
            suffix = "" if part is None else f" ({part})"
            rows.append((run + suffix, base + suffix, result))
            out[run + suffix] = {"baseline": base + suffix, **result}
    title = ("\nPaired difference against the baseline over the seeds both finished, in points: mean ± std of "
             "(run - baseline) per seed, (seeds where the run is ahead / seeds paired)\n\n")
    return title + paired_table(rows, columns), out


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
    baselines: Sequence[str] = (),
) -> str:
    """Run ``protocol`` for each config over ``seeds``; write and return the markdown table.

    Runs go to ``out_dir/<name>-seed<s>[-fold<k>]`` and are reused when the
    command is run again, so a stopped table resumes where it was. ``jobs > 1``
    trains the missing runs in that many processes first; ``reuse=True`` trains
    nothing and reports the finished runs only (``n=`` in each row says how many seeds).
    ``baselines`` (config names) adds a table of paired differences: each run against the
    baseline its name extends (the longest prefix), seed by seed (:mod:`dmlkit.protocols.paired`).
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol '{protocol}'; valid: {', '.join(PROTOCOLS)}")
    check_batch_arguments("run_protocol", configs, seeds, columns)
    pairs = assign_baselines([load_config(p, list(overrides)).name for p in configs], baselines) if baselines else {}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    collect = partial(_collect, protocol, configs, out, seeds, overrides, folds)
    (rows, raw), errors = gather_runs(collect, jobs=jobs, reuse=reuse, quiet=quiet)
    title = f"{protocol} protocol, seeds {', '.join(map(str, seeds))} (mean ± std over the n seeds done, metrics in %)\n\n"
    table = title + markdown_table(rows, columns, extra=TIME_COLUMN)
    record: dict[str, Any] = {"protocol": protocol, "seeds": list(seeds), "runs": raw}
    if pairs:
        paired_md, record["paired"] = _paired(raw, pairs, protocol, columns)
        table += paired_md
    (out / "results.md").write_text(table)
    (out / "results.json").write_text(json.dumps(record, indent=2) + "\n")
    if errors:
        raise RuntimeError(f"{len(errors)} run(s) failed; the table holds the others:\n" + "\n".join(errors))
    return table
