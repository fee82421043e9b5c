"""``run_protocol``: one protocol, several configs, several seeds -> ``results.md`` and ``results.json``."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any, Sequence

from dmlkit.config import load_config
from dmlkit.protocols.backbones import across_backbones, backbone_label, backbones_table
from dmlkit.protocols.conventional import FACT_PREFIX, PROTOCOL_OVERRIDES, run_single_model
from dmlkit.protocols.fair import run_fair
from dmlkit.protocols.runs import NotingRuns, Obtain, check_batch_arguments, gather_runs
from dmlkit.protocols.run_machines import check_comparable
from dmlkit.protocols.paired import assign_baselines, paired_difference, paired_table
from dmlkit.protocols.table import check_columns, markdown_table, summarise

PROTOCOLS = (*PROTOCOL_OVERRIDES, "fair")
TIME_COLUMN = [
    ("steps", "steps", 0),
    ("best step", "best_step", 0),
    ("train s", "train_seconds", 0),
    ("s/step", "seconds_per_step", 2),
]


def run_columns(rows: Sequence[tuple[str, dict[str, Any]]]) -> list[tuple[str, str, int]]:
    """``TIME_COLUMN`` and one column per method fact (``seed_metrics``) that any row holds, in first-seen order,
    with one decimal (a mean over seeds of a count)."""
    facts = dict.fromkeys(key for _, stats in rows for key in stats if key.startswith(FACT_PREFIX))
    return [*TIME_COLUMN, *((key[len(FACT_PREFIX) :], key, 1) for key in facts)]


def _collect(
    protocol: str,
    configs: Sequence[str | Path],
    out: Path,
    seeds: Sequence[int],
    overrides: Sequence[str],
    folds: int,
    obtain: Obtain,
    backbone: str | None = None,
) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]]:
    rows: list[tuple[str, dict[str, Any]]] = []
    raw: dict[str, Any] = {}
    obtain_noting = NotingRuns(obtain)  # every run folder the table reads: checked before they are compared
    for path in configs:
        name = load_config(path, list(overrides)).name
        label = name if backbone is None else backbone_label(name, backbone)
        if protocol == "fair":
            result = run_fair(path, overrides, seeds, out, obtain_noting, folds=folds)
            for part in ("separated", "concatenated"):
                rows.append((f"{label} ({part}, n={len(result[part])})", summarise(result[part])))
            raw[name] = result
        else:
            per_seed = run_single_model(protocol, path, overrides, seeds, out, obtain_noting)
            rows.append((f"{label} (n={len(per_seed)})", summarise(per_seed)))
            raw[name] = per_seed
    check_comparable(obtain_noting.run_dirs)
    return rows, raw


def _collect_backbones(
    protocol: str,
    configs: Sequence[str | Path],
    out: Path,
    seeds: Sequence[int],
    overrides: Sequence[str],
    folds: int,
    backbones: dict[str, str],
    obtain: Obtain,
) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]]:
    """``_collect`` once per pretrained backbone (``{label: model.pretrained}``, ``backbone_entries``), its runs
    under ``out/<label>/``."""
    rows: list[tuple[str, dict[str, Any]]] = []
    raw: dict[str, Any] = {}
    for label, weights in backbones.items():
        with_backbone = [*overrides, f"model.pretrained={weights}"]
        part_rows, raw[label] = _collect(protocol, configs, out / label, seeds, with_backbone, folds, obtain, label)
        rows += part_rows
    return rows, raw


def _paired_rows(
    raw: dict[str, Any], pairs: dict[str, str], protocol: str, keys: Sequence[str], backbone: str | None = None
) -> list[tuple[str, str, dict[str, Any]]]:
    """``(run, baseline, paired_difference)`` of every pair (and fair part) on one backbone's runs."""
    rows = []
    parts = ("separated", "concatenated") if protocol == "fair" else (None,)
    label = (lambda n: n) if backbone is None else (lambda n: backbone_label(n, backbone))
    for run, base in pairs.items():
        for part in parts:
            method, reference = (raw[run], raw[base]) if part is None else (raw[run][part], raw[base][part])
            suffix = "" if part is None else f" ({part})"
            rows.append((label(run) + suffix, label(base) + suffix, paired_difference(method, reference, keys)))
    return rows


def _paired(
    raw: dict[str, Any], pairs: dict[str, str], protocol: str, columns: str, backbones: Sequence[str] = ()
) -> tuple[str, dict[str, Any]]:
    """The paired-difference table(s) (markdown) and their JSON form for ``{run: baseline}``; with ``backbones``,
    one row per pair and backbone, then the pairs pooled over the backbones (``protocols.backbones``)."""
    keys = [key for _, key in check_columns(columns)]
    if backbones:
        rows = [row for b in backbones for row in _paired_rows(raw[b], pairs, protocol, keys, b)]
    else:
        rows = _paired_rows(raw, pairs, protocol, keys)
    out: dict[str, Any] = {run: {"baseline": base, **result} for run, base, result in rows}
    title = (
        "\nPaired difference against the baseline over the seeds both finished, in points: mean ± std of "
        "(run - baseline) per seed, (seeds where the run is ahead / seeds paired)\n\n"
    )
    text = title + paired_table(rows, columns)
    if backbones:
        per_row = {label: result for label, _, result in rows}  # the per-backbone differences, computed once above
        pooled = [
            (run, base, across_backbones({b: per_row[backbone_label(run, b)] for b in backbones}, keys))
            for run, base in pairs.items()
        ]
        out["across_backbones"] = {run: {"baseline": base, **p} for run, base, p in pooled}
        text += (
            f"\n\nPooled over the backbones {', '.join(backbones)}: mean of every (backbone, seed) difference "
            "(seeds: spread across seeds within a backbone; backbones: spread of the per-backbone means; seeds "
            "ahead / paired on each backbone) and the verdict (ahead or behind: on at least 4 of 5 seeds on every "
            "backbone)\n\n" + backbones_table(pooled, columns)
        )
    return text, out


def backbone_entries(protocol: str, backbones: Sequence[str]) -> dict[str, str]:
    """``{label: model.pretrained}`` of a ``--backbones`` list: a pretrained-backbone name is its own label, a
    weights file (e.g. a cache entry built on another machine) is labelled by its file name without the suffix.
    The label names the runs' folder and the tables' rows. Refuses lists that cannot be tabulated: the fair
    protocol, an entry that is neither a name nor a file, one backbone or one label twice."""
    from dmlkit.assemble.pretrained import canonical_pretrained_name, is_pretrained_name, list_pretrained

    if not backbones:
        return {}
    if protocol == "fair":
        raise ValueError(
            "--backbones pools single-model protocols (conventional, holdout); run the fair protocol "
            "once per backbone with --set model.pretrained=NAME"
        )
    entries: dict[str, str] = {}
    same: dict[str, str] = {}  # what makes two entries one backbone -> the entry
    for name in backbones:
        if is_pretrained_name(name):
            label, identity = name, canonical_pretrained_name(name)  # a malformed seed raises here
        elif Path(name).expanduser().is_file():
            label, identity = Path(name).stem, str(Path(name).expanduser().resolve())
        else:
            raise ValueError(
                f"--backbones takes pretrained-backbone names ({', '.join(list_pretrained())}, each also as "
                f"<name>@seed<N>) or weights files; got '{name}', which is neither (no such file)"
            )
        if identity in same:
            raise ValueError(
                f"--backbones names one backbone twice ('{same[identity]}' and '{name}'; <name> and "
                "<name>@seed<its own seed> are the same backbone)"
            )
        if label in entries:
            raise ValueError(
                f"--backbones entries '{entries[label]}' and '{name}' would share the label '{label}' "
                "(their runs' folder); rename one of the weights files"
            )
        same[identity], entries[label] = name, name
    return entries


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
    backbones: Sequence[str] = (),
) -> str:
    """Run ``protocol`` for each config over ``seeds``; write and return the markdown table.

    Runs go to ``out_dir/<name>-seed<s>[-fold<k>]`` and are reused when the
    command is run again, so a stopped table resumes where it was. ``jobs > 1``
    trains the missing runs in that many processes first; ``reuse=True`` trains
    nothing and reports the finished runs only (``n=`` in each row says how many seeds).
    ``baselines`` (config names) adds a table of paired differences: each run against the
    baseline its name extends (the longest prefix), seed by seed (:mod:`dmlkit.protocols.paired`).
    ``backbones`` (pretrained names, e.g. ``glyphs-resnet20@seed1``, or weights files) runs every config x seed on
    each, under ``out_dir/<label>/`` (``backbone_entries``), and pools the paired differences over them (:mod:`dmlkit.protocols.backbones`).
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol '{protocol}'; valid: {', '.join(PROTOCOLS)}")
    check_batch_arguments("run_protocol", configs, seeds, columns)
    pairs = assign_baselines([load_config(p, list(overrides)).name for p in configs], baselines) if baselines else {}
    named = backbone_entries(protocol, backbones)
    backbones = list(named)  # the labels: folders, table rows, results.json's keys
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if backbones:
        collect = partial(_collect_backbones, protocol, configs, out, seeds, overrides, folds, named)
    else:
        collect = partial(_collect, protocol, configs, out, seeds, overrides, folds)
    (rows, raw), errors = gather_runs(collect, jobs=jobs, reuse=reuse, quiet=quiet)
    title = (
        f"{protocol} protocol, seeds {', '.join(map(str, seeds))} (mean ± std over the n seeds done, metrics in %)\n\n"
    )
    table = title + markdown_table(rows, columns, extra=run_columns(rows))
    record: dict[str, Any] = {"protocol": protocol, "seeds": list(seeds), "runs": raw}
    if backbones:
        record["backbones"] = named
    if pairs:
        paired_md, record["paired"] = _paired(raw, pairs, protocol, columns, backbones)
        table += paired_md
    (out / "results.md").write_text(table)
    (out / "results.json").write_text(json.dumps(record, indent=2) + "\n")
    if errors:
        raise RuntimeError(f"{len(errors)} run(s) failed; the table holds the others:\n" + "\n".join(errors))
    return table
