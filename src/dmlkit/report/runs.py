"""Read finished run folders and compare them: flattened configs, their differences, groups of seeds.

A run folder (``dmlkit.engine.run_folder.RunFolder``) holds ``config.yaml``,
``metrics.jsonl``, ``summary.json``, ``environment.json``, checkpoints and ``plots/``.
Runs whose configs are equal once ``seed`` (and the labels ``name`` / ``output_dir``) are
removed, and that ran with the same number of processes (``environment.json``'s world size:
each process normalises its own slice of the batch), are one experiment: a report shows their
test metrics as mean and sample standard deviation over the distinct seeds. Several runs of one
seed in one experiment are repeats (``seed_repeats``): averaged into one value per seed, never
counted as more seeds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import yaml

from dmlkit.config_migration import migrate_values
from dmlkit.engine.environment import read_environment
from dmlkit.engine.run_folder import RunFolder

__all__ = [
    "GROUP_IGNORED_KEYS",
    "MISSING",
    "RunRecord",
    "config_differences",
    "flatten",
    "group_runs",
    "load_run",
    "load_runs",
    "seed_repeats",
]

#: Keys that do not make two runs different experiments (they are labels or the repeat index).
GROUP_IGNORED_KEYS = ("seed", "name", "output_dir")
#: Shown where a run's config lacks a key that another run has.
MISSING = "(absent)"


@dataclass
class RunRecord:
    """One finished run, read from its folder."""

    path: Path
    config: dict[str, Any]
    summary: dict[str, Any]
    records: list[dict[str, Any]]
    plots: dict[str, Path] = field(default_factory=dict)  # PNGs under plots/, by path relative to it
    label: str = ""
    environment: dict[str, Any] = field(default_factory=dict)  # environment.json ({} for older run folders)

    @property
    def flat_config(self) -> dict[str, Any]:
        return flatten(self.config)

    @property
    def test_metrics(self) -> dict[str, float]:
        return dict(self.summary.get("test", {}))

    @property
    def seed(self) -> Any:
        return self.summary.get("seed", self.config.get("seed"))

    @property
    def world_size(self) -> int | None:
        """Processes that trained the run (None: not recorded by the dmlkit that wrote it)."""
        return self.environment.get("world_size")


def load_run(path: str | Path) -> RunRecord:
    """Read the run folder ``path``; a ``ValueError`` names the file that is missing or unreadable."""
    folder = RunFolder(path)
    if not folder.path.is_dir():
        raise ValueError(
            f"'{folder.path}' is not a run folder: no such directory; pass a folder written by dmlkit train"
        )
    for required in (folder.config, folder.metrics, folder.summary):
        if not required.is_file():
            hint = (
                f" (the run has not finished: finish it with dmlkit train --resume {folder.path})"
                if required == folder.summary and folder.last_checkpoint.is_file()
                else "; pass a folder written by dmlkit train"
            )
            raise ValueError(f"'{folder.path}' is not a run folder: missing {required.name}{hint}")
    try:
        config = yaml.safe_load(folder.config.read_text()) or {}
        summary = json.loads(folder.summary.read_text())
    except (yaml.YAMLError, json.JSONDecodeError) as err:
        raise ValueError(f"'{folder.path}': config.yaml or summary.json could not be parsed ({err})") from err
    if not isinstance(config, dict) or not isinstance(summary, dict):
        raise ValueError(f"'{folder.path}': config.yaml and summary.json must each hold a mapping")
    config = migrate_values(config, f"in {folder.config}")  # a run saved before methods: compares key by key
    records = []
    for number, line in enumerate(folder.metrics.read_text().splitlines(), start=1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"'{folder.metrics}' line {number} is not JSON ({err})") from err
    plots = (
        {p.relative_to(folder.plots).as_posix(): p for p in sorted(folder.plots.rglob("*.png"))}
        if folder.plots.is_dir()
        else {}
    )
    environment = read_environment(folder.environment) or {}
    return RunRecord(folder.path, config, summary, records, plots, label=folder.path.name, environment=environment)


def load_runs(paths: Sequence[str | Path]) -> list[RunRecord]:
    """Read several run folders and give each a unique label (its folder name, or more of its path)."""
    if not paths:
        raise ValueError("a report needs at least one run folder")
    resolved = [Path(p).resolve() for p in paths]
    twice = sorted({str(p) for p in resolved if resolved.count(p) > 1})
    if twice:
        raise ValueError(f"run folder(s) {', '.join(twice)} given more than once; pass each run once")
    runs = [load_run(p) for p in paths]
    depth = 1
    while len({r.label for r in runs}) < len(runs) and depth < 8:
        depth += 1
        for run in runs:
            run.label = "/".join(run.path.resolve().parts[-depth:])
    return runs


def flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"train": {"lr": 1e-3}}`` -> ``{"train.lr": 1e-3}``; lists and empty mappings stay values."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            flat.update(flatten(value, path))
        else:
            flat[path] = value
    return flat


def config_differences(configs: Sequence[dict[str, Any]], ignore: Sequence[str] = ()) -> dict[str, list[Any]]:
    """Dotted keys whose values are not all equal across ``configs`` (nested dicts), sorted by key.

    Each key maps to its value in every config, ``MISSING`` where a config lacks it.
    """
    flats = [flatten(c) for c in configs]
    keys = sorted({k for f in flats for k in f} - set(ignore))
    diffs = {}
    for key in keys:
        values = [f.get(key, MISSING) for f in flats]
        if any(v != values[0] for v in values[1:]):
            diffs[key] = values
    return diffs


def group_runs(
    runs: Sequence[RunRecord], ignore: Sequence[str] = GROUP_IGNORED_KEYS
) -> list[tuple[str, list[RunRecord]]]:
    """Runs grouped by their config without ``ignore`` (seeds of one experiment), in order of appearance.

    Runs of one config trained by another number of processes form another group. A group's
    label lists the config values (and world size) that set it apart from the other groups
    (``loss.name=triplet``), or its config name when there is a single group.
    """
    groups: dict[str, list[RunRecord]] = {}
    for run in runs:
        flat = {k: v for k, v in run.flat_config.items() if k not in ignore}
        key = json.dumps([flat, run.world_size], sort_keys=True, default=str)
        groups.setdefault(key, []).append(run)
    members = list(groups.values())
    diffs = config_differences([g[0].config for g in members], ignore=ignore)
    sizes = [g[0].world_size for g in members]
    if len(set(sizes)) > 1:
        diffs["world_size"] = ["unknown" if size is None else size for size in sizes]
    labelled = []
    for i, group in enumerate(members):
        parts = [f"{key}={values[i]}" for key, values in diffs.items()]
        label = ", ".join(parts) if parts else str(group[0].config.get("name", group[0].label))
        labelled.append((label, group))
    return labelled


def seed_repeats(members: Sequence[RunRecord]) -> dict[Any, list[RunRecord]]:
    """The runs of one experiment by seed, in order of appearance: more than one run under a seed are repeats."""
    by_seed: dict[Any, list[RunRecord]] = {}
    for run in members:
        by_seed.setdefault(run.seed, []).append(run)
    return by_seed
