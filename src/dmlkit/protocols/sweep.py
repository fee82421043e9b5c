"""Parameter sweeps: a grid of config overrides per config, repeated over seeds, tabulated and plotted.

``dmlkit sweep holdout CONFIG... --grid methods.ccp.proxies_per_class=1,2,4 --grid methods.ccp.pool_size=4,6,8`` trains one
run per config, grid point and seed (the thesis' Fig. 3.6 proxies x pool ablation, Fig. 3.8 batch sizes,
Fig. 5.8 effect of mu, ...). Each grid point is its own experiment, named
``<config name>__<key><value>...`` (last component of each key), so its runs resume and are reused
like a protocol's. A grid point the config rejects (e.g. a pool smaller than the proxy count) is
reported as invalid and skipped; a key no config accepts is an error before anything trains.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from functools import partial
from pathlib import Path
from typing import Any, Sequence

from dmlkit.config import load_config
from dmlkit.extras import require
from dmlkit.protocols.conventional import PROTOCOL_OVERRIDES, run_single_model
from dmlkit.protocols.results import run_columns
from dmlkit.protocols.run_machines import check_comparable
from dmlkit.protocols.runs import NotingRuns, Obtain, check_batch_arguments, gather_runs
from dmlkit.protocols.table import markdown_table, summarise

Point = tuple[tuple[str, str], ...]
_SAFE = re.compile(r"[^A-Za-z0-9.+-]")


def parse_grid(specs: Sequence[str]) -> dict[str, list[str]]:
    """``["key=v1,v2", ...]`` -> ``{key: [v1, v2]}`` in the order given; malformed specs are errors."""
    grid: dict[str, list[str]] = {}
    for spec in specs:
        key, sep, values = spec.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"grid '{spec}' must be KEY=V1,V2,... (e.g. methods.ccp.pool_size=4,6,8)")
        if key in grid:
            raise ValueError(f"grid key '{key}' is given twice; list all its values once: {key}=V1,V2,...")
        items = [v.strip() for v in values.split(",")]
        if not all(items):
            raise ValueError(f"grid '{spec}' has an empty value; write {key}=V1,V2,... without empty entries")
        if len(set(items)) != len(items):
            raise ValueError(f"grid '{spec}' repeats a value")
        grid[key] = items
    if not grid:
        raise ValueError("a sweep needs at least one --grid KEY=V1,V2,...")
    return grid


def grid_points(grid: dict[str, list[str]]) -> list[Point]:
    """Every combination of the grid's values, first key slowest."""
    keys = list(grid)
    return [tuple(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]


def point_name(base: str, point: Point) -> str:
    """The experiment name of ``point``: ``base__<last key part><value>...`` (file-system safe)."""
    parts = [_SAFE.sub("_", f"{key.rsplit('.', 1)[-1]}{value}") for key, value in point]
    return "__".join([base, *parts])


def point_overrides(base: str, point: Point) -> list[str]:
    return [f"{key}={value}" for key, value in point] + [f"name={point_name(base, point)}"]


def _valid_points(path: str | Path, overrides: Sequence[str], points: Sequence[Point]) -> tuple[str, dict[Point, str]]:
    """The config's name and ``{point: reason}`` for the points it rejects; all rejected is an error."""
    base = load_config(path, list(overrides)).name
    invalid: dict[Point, str] = {}
    for point in points:
        try:
            load_config(path, [*overrides, *point_overrides(base, point)])
        except ValueError as err:
            invalid[point] = str(err).splitlines()[0].split(": ")[0]  # the rule broken, not the advice
    if len(invalid) == len(points):
        first = next(iter(invalid.values()))
        raise ValueError(f"every grid point is rejected by {path}; the first: {first}")
    return base, invalid


def _collect(
    protocol: str,
    plans: Sequence[tuple[str | Path, str, dict[Point, str]]],
    points: Sequence[Point],
    out: Path,
    seeds: Sequence[int],
    overrides: Sequence[str],
    obtain: Obtain,
) -> list[dict[str, Any]]:
    results = []
    noting = NotingRuns(obtain)  # the points are compared as a table's rows are: the same checks first
    for path, base, invalid in plans:
        for point in points:
            entry: dict[str, Any] = {"config": base, "point": dict(point), "name": point_name(base, point)}
            if point in invalid:
                entry.update(invalid=invalid[point], per_seed=[])
            else:
                entry["per_seed"] = run_single_model(
                    protocol, path, [*overrides, *point_overrides(base, point)], seeds, out, noting
                )
            results.append(entry)
    check_comparable(noting.run_dirs)
    return results


def _row_label(entry: dict[str, Any]) -> str:
    setting = ", ".join(f"{k}={v}" for k, v in entry["point"].items())
    if "invalid" in entry:
        return f"{entry['config']} [{setting}] (invalid: {entry['invalid']})"
    return f"{entry['config']} [{setting}] (n={len(entry['per_seed'])})"


def run_sweep(
    protocol: str,
    configs: Sequence[str | Path],
    grid: dict[str, list[str]],
    out_dir: str | Path,
    seeds: Sequence[int] = (0,),
    overrides: Sequence[str] = (),
    columns: str = "thesis",
    metric: str = "mean_average_precision_at_r",
    quiet: bool = True,
    jobs: int = 1,
    reuse: bool = False,
) -> str:
    """Train (or reuse) every config x grid point x seed; write ``results.md``, ``results.json`` and ``sweep.png``.

    The figure plots ``metric`` (mean ± std over seeds): against the values of a
    one-key grid, one line per config; as one heat-map per config for a
    two-key grid (rows: first key). Larger grids get the table only.
    """
    if protocol not in PROTOCOL_OVERRIDES:
        raise ValueError(
            f"sweeps run a single-model protocol; valid: {', '.join(PROTOCOL_OVERRIDES)} (got '{protocol}')"
        )
    check_batch_arguments("run_sweep", configs, seeds, columns)
    if len(grid) <= 2:  # sweep.png is drawn after every run: its package is checked before the first
        require("matplotlib", "plots", "dmlkit sweep's sweep.png")
    points = grid_points(grid)
    plans = [(path, *_valid_points(path, overrides, points)) for path in configs]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    collect = partial(_collect, protocol, plans, points, out, seeds, overrides)
    results, errors = gather_runs(collect, jobs=jobs, reuse=reuse, quiet=quiet)
    for entry in results:
        entry["summary"] = summarise(entry["per_seed"])
    rows = [(_row_label(e), e["summary"]) for e in results]
    title = (
        f"{protocol} protocol sweep over {', '.join(grid)}, seeds {', '.join(map(str, seeds))} "
        f"(mean ± std over the n seeds done, metrics in %)\n\n"
    )
    table = title + markdown_table(rows, columns, extra=run_columns(rows))
    (out / "results.md").write_text(table)
    record = {
        "protocol": protocol,
        "grid": grid,
        "seeds": list(seeds),
        "metric": metric,
        "results": [{k: v for k, v in e.items() if k != "summary"} for e in results],
    }
    (out / "results.json").write_text(json.dumps(record, indent=2) + "\n")
    if len(grid) <= 2:
        from dmlkit.viz.sweep_plots import sweep_figure

        sweep_figure(sweep_cells(results, metric), list(grid), grid, metric, out / "sweep.png")
    if errors:
        raise RuntimeError(f"{len(errors)} run(s) failed; the table holds the others:\n" + "\n".join(errors))
    return table


def sweep_cells(
    results: Sequence[dict[str, Any]], metric: str
) -> dict[str, dict[tuple[str, ...], tuple[float, float]]]:
    """``{config: {point values: (mean, std) of metric}}``; NaN for invalid or unfinished points."""
    cells: dict[str, dict[tuple[str, ...], tuple[float, float]]] = {}
    for entry in results:
        stat = entry.get("summary", {}).get(metric, (math.nan, math.nan))
        cells.setdefault(entry["config"], {})[tuple(entry["point"].values())] = stat
    return cells
