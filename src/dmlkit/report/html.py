"""``build_report``: one self-contained HTML page comparing run folders (what ``dmlkit report`` writes).

The page has no external assets and no script: figures are PNGs embedded as
``data:image/png;base64`` URIs, the style sheet is inline. Sections:

1. runs: folder, seed, steps, best step, training time, processes and device;
2. config differences: the dotted keys whose values differ between runs (and the world size);
3. test metrics: one row per experiment (runs grouped by config without seed and by world size,
   ``report.runs.group_runs``) with mean ± sample std over its distinct seeds (repeats of a
   seed are averaged first and counted as repeats), then one row per run;
4. training curves of all runs on shared axes (from ``metrics.jsonl``);
5. per run: the 2-D PCA projection of the test embeddings and the positive /
   negative pair-distance histogram (``plots/`` of the run);
6. nearest-neighbour galleries (``plots/nearest_neighbours.png``, or drawn on demand);
7. method-specific figures: every other PNG under a run's ``plots/`` (SFT divergences and
   the other ``plots/geometry_<split>/`` figures of ``dmlkit evaluate --diagnostics``, CCP
   proxies, GSP heat-maps, ...), captioned with its path relative to ``plots/``;
8. hyperparameter studies (folders of ``dmlkit tune``): their space, best trial, trials and figures
   (``report.study``).
"""

from __future__ import annotations

import base64
import html
import io
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from dmlkit.evaluation.metric_values import short_metric_name
from dmlkit.protocols.table import mean_std
from dmlkit.report.runs import RunRecord, config_differences, group_runs, load_runs, seed_repeats

__all__ = ["STANDARD_PLOTS", "build_report", "render_report", "short_metric_name"]

#: Plots every run writes (``Trainer._plot``); the training curves are redrawn for all runs together.
CURVES_PLOT = "training_curves.png"
PROJECTION_PLOT = "test_embeddings_pca.png"
DISTANCES_PLOT = "test_distances.png"
STANDARD_PLOTS = (CURVES_PLOT, PROJECTION_PLOT, DISTANCES_PLOT)

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: .9em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
thead th { background: #f0f0f0; } tr:nth-child(even) td { background: #fafafa; }
td.best { font-weight: bold; } .note { color: #666; font-size: .9em; }
figure { display: inline-block; margin: .5em 1em .5em 0; vertical-align: top; }
figure img { max-width: 100%; border: 1px solid #ddd; } figcaption { font-size: .85em; color: #444; }
code { background: #f4f4f4; padding: 0 .2em; }
.row { display: flex; flex-wrap: wrap; gap: 1em; align-items: flex-start; } .row figure { flex: 1 1 40%; margin: 0; } .scroll { overflow-x: auto; } table.metrics td { white-space: nowrap; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _png_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _figure(data: bytes, caption: str, alt: str | None = None) -> str:
    return (
        f'<figure><img src="{_png_uri(data)}" alt="{_e(alt or caption)}">'
        f"<figcaption>{_e(caption)}</figcaption></figure>"
    )


def _table(
    header: Sequence[str | tuple[str, str]], rows: Sequence[Sequence[str]], raw: bool = False, cls: str = ""
) -> str:
    """An HTML table; cells are escaped unless ``raw`` (then they are trusted HTML ``<td>`` contents).

    A header given as ``(text, tooltip)`` gets the tooltip as its ``title``.
    """
    head = "".join(
        f'<th title="{_e(h[1])}">{_e(h[0])}</th>' if isinstance(h, tuple) else f"<th>{_e(h)}</th>" for h in header
    )
    body = []
    for row in rows:
        cells = row if raw else [f"<td>{_e(c)}</td>" for c in row]
        body.append("<tr>" + "".join(cells) + "</tr>")
    attr = f' class="{cls}"' if cls else ""
    return (
        f'<div class="scroll"><table{attr}><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'
    )


def _fmt(value: Any) -> str:
    """A config or summary value as its YAML spelling (``null``, ``true``), floats to 4 significant digits."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _metric(value: Any) -> str:
    """A metric in percent with two decimals, as every table a person reads (summary.json keeps fractions)."""
    return f"{100 * value:.2f}" if isinstance(value, (int, float)) else "n/a"


def _device(run: RunRecord) -> str:
    device = run.environment.get("device") or {}
    return " ".join(str(device[k]) for k in ("type", "name", "capability") if device.get(k)) or "?"


def _runs_section(runs: Sequence[RunRecord]) -> str:
    rows = []
    for run in runs:
        s = run.summary
        rows.append(
            [
                run.label,
                str(run.path),
                _fmt(run.seed if run.seed is not None else ""),
                _fmt(s.get("steps", "")),
                _fmt(s.get("best_step", "")),
                _fmt(s.get("train_seconds", "")),
                {True: "test split", False: "validation split"}.get(s.get("validated_on_test"), "?"),
                _fmt(run.world_size if run.world_size is not None else "?"),
                _device(run),
            ]
        )
    header = ["run", "folder", "seed", "steps", "best step", "train s", "early stopping on", "processes", "device"]
    return "<h2>Runs</h2>" + _table(header, rows)


def _config_section(runs: Sequence[RunRecord]) -> str:
    diffs = config_differences([r.config for r in runs])
    if len({r.world_size for r in runs}) > 1:
        diffs["world_size (processes)"] = ["?" if r.world_size is None else r.world_size for r in runs]
    if not diffs:
        body = '<p class="note">All runs have the same config.</p>'
    else:
        body = _table(
            ["config key"] + [r.label for r in runs], [[k] + [_fmt(v) for v in vals] for k, vals in diffs.items()]
        )
    return "<h2>Config differences</h2>" + body


def _metric_names(runs: Sequence[RunRecord]) -> list[str]:
    names: list[str] = []
    for run in runs:
        names += [k for k in run.test_metrics if k not in names]
    return names


def _seed_values(members: Sequence[RunRecord], metric: str) -> list[float]:
    """One value per distinct seed of an experiment: the mean over that seed's repeats."""
    values = []
    for repeats in seed_repeats(members).values():
        found = [r.test_metrics[metric] for r in repeats if metric in r.test_metrics]
        if found:
            values.append(sum(found) / len(found))
    return values


def _seeds_cell(members: Sequence[RunRecord]) -> str:
    """``3``, or ``2 (3 runs: seed 0 ×2)`` when some seed was run more than once."""
    by_seed = seed_repeats(members)
    if len(by_seed) == len(members):
        return str(len(by_seed))
    repeated = ", ".join(f"seed {seed} ×{len(runs)}" for seed, runs in by_seed.items() if len(runs) > 1)
    return f"{len(by_seed)} ({len(members)} runs: {repeated})"


def _per_run_seed(runs: Sequence[RunRecord]) -> dict[int, str]:
    """The seed cell of each run of the per-run table; the second and later runs of a seed say which repeat they are."""
    cells = {}
    for _, members in group_runs(runs):
        for seed, repeats in seed_repeats(members).items():
            for i, run in enumerate(repeats, 1):
                cells[id(run)] = _fmt(seed if seed is not None else "") + (f" (repeat {i})" if i > 1 else "")
    return cells


def _metrics_section(runs: Sequence[RunRecord]) -> str:
    names = _metric_names(runs)
    groups = group_runs(runs)
    stats = [{m: mean_std(_seed_values(members, m), single_std=math.nan) for m in names} for _, members in groups]
    best = {m: max((s[m][0] for s in stats if not math.isnan(s[m][0])), default=math.nan) for m in names}
    rows = []
    for (label, members), stat in zip(groups, stats):
        cells = [f"<td>{_e(label)}</td>", f"<td>{_e(_seeds_cell(members))}</td>"]
        for m in names:
            mean, std = stat[m]
            if math.isnan(mean):
                cells.append("<td>n/a</td>")
                continue
            text = f"{100 * mean:.2f} ± {100 * std:.2f}" if not math.isnan(std) else f"{100 * mean:.2f}"
            cls = ' class="best"' if len(groups) > 1 and mean == best[m] else ""
            cells.append(f"<td{cls}>{_e(text)}</td>")
        rows.append(cells)
    columns = [(short_metric_name(m), m) for m in names]
    grouped = _table(["experiment", "seeds", *columns], rows, raw=True, cls="metrics")
    seeds = _per_run_seed(runs)
    per_run = _table(
        ["run", "seed", *columns],
        [[r.label, seeds[id(r)]] + [_metric(r.test_metrics.get(m)) for m in names] for r in runs],
    )
    note = (
        '<p class="note">Test metrics of each run\'s best weights (summary.json), in percent. Runs whose configs agree except '
        "for <code>seed</code> (and <code>name</code>, <code>output_dir</code>) and that ran with the same number of "
        "processes form one experiment: mean ± sample standard deviation over its distinct seeds (runs repeating "
        "a seed are averaged into that seed's value and shown as repeats, not counted as seeds); bold: the best "
        "mean. P@1: precision at 1, R@k: recall at k, RP: R-precision, MAP@R: mean average precision at R "
        "(hover a header for the full key).</p>"
    )
    return "<h2>Test metrics</h2>" + note + grouped + "<h3>Per run</h3>" + per_run


def _curves_section(runs: Sequence[RunRecord]) -> str:
    from dmlkit.viz.compare import compare_training_curves

    index = {id(r): i for i, (_, members) in enumerate(group_runs(runs)) for r in members}
    metric = str(runs[0].config.get("train", {}).get("val_metric", "mean_average_precision_at_r"))
    buf = io.BytesIO()
    compare_training_curves([(r.label, index[id(r)], r.records) for r in runs], buf, val_metric=metric)
    return "<h2>Training curves</h2>" + _figure(buf.getvalue(), "training loss and validation score of every run")


def _run_figures(run: RunRecord, names: Sequence[str], missing_hint: str) -> str:
    parts = []
    for name in names:
        if name in run.plots:
            parts.append(_figure(run.plots[name].read_bytes(), f"{run.label}: {name}"))
        else:
            parts.append(f'<p class="note">{_e(run.label)}: no plots/{_e(name)} ({_e(missing_hint)}).</p>')
    return '<div class="row">' + "".join(parts) + "</div>"


def _embeddings_section(runs: Sequence[RunRecord]) -> str:
    body = "".join(
        f"<h3>{_e(r.label)}</h3>"
        + _run_figures(r, [PROJECTION_PLOT, DISTANCES_PLOT], "the run was trained with plots: false")
        for r in runs
    )
    return "<h2>Test embeddings: 2-D projection and pair distances</h2>" + body


def _gallery_section(runs: Sequence[RunRecord], draw: bool, queries: int, k: int) -> str:
    from dmlkit.report.gallery import GALLERY_FILE, run_gallery

    parts = []
    for run in runs:
        if GALLERY_FILE in run.plots:
            parts.append(_figure(run.plots[GALLERY_FILE].read_bytes(), f"{run.label}: {GALLERY_FILE}"))
        elif draw:
            buf = io.BytesIO()
            run_gallery(run.path, buf, queries=queries, k=k)
            parts.append(_figure(buf.getvalue(), f"{run.label}: nearest neighbours (drawn for this report)"))
    if not parts:
        body = (
            '<p class="note">No gallery: draw one with <code>dmlkit gallery RUN_DIR</code> '
            "(written to plots/nearest_neighbours.png) or pass <code>--gallery</code> to dmlkit report.</p>"
        )
    else:
        body = '<p class="note">Queries (blue) and their nearest test images: green = same class, red = another.</p>'
        body += '<div class="row">' + "".join(parts) + "</div>"
    return "<h2>Nearest neighbours</h2>" + body


def _extras_section(runs: Sequence[RunRecord]) -> str:
    from dmlkit.report.gallery import GALLERY_FILE

    known = {*STANDARD_PLOTS, GALLERY_FILE}
    parts = []
    for run in runs:
        extra = [name for name in run.plots if name not in known]
        if extra:
            figures = "".join(_figure(run.plots[n].read_bytes(), n) for n in extra)
            parts.append(f'<h3>{_e(run.label)}</h3><div class="row">{figures}</div>')
    if not parts:
        return ""
    return "<h2>Method-specific figures</h2>" + "".join(parts)


def render_report(
    runs: Sequence[RunRecord], title: str | None = None, gallery: bool = False, queries: int = 8, k: int = 5
) -> str:
    """The HTML text of the report of ``runs`` (see the module docstring for its sections)."""
    title = title or f"dmlkit report: {', '.join(r.label for r in runs)}"
    sections = [
        _runs_section(runs),
        _config_section(runs),
        _metrics_section(runs),
        _curves_section(runs),
        _embeddings_section(runs),
        _gallery_section(runs, gallery, queries, k),
        _extras_section(runs),
    ]
    return _page(title, "".join(sections), f"{len(runs)} run(s)")


def _page(title: str, body: str, what: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>"
        f'<h1>{_e(title)}</h1><p class="note">{what}, generated {stamp} by dmlkit report.</p>'
        + body
        + "</body></html>\n"
    )


def build_report(
    run_dirs: Sequence[str | Path],
    out: str | Path = "report.html",
    title: str | None = None,
    gallery: bool = False,
    queries: int = 8,
    k: int = 5,
) -> Path:
    """Write the report comparing the run folders ``run_dirs`` to ``out``; return its path.

    ``gallery=True`` draws the nearest-neighbour gallery of runs that have none in ``plots/``
    (rebuilding their model and embedding their test split). A folder that is not a finished
    run is a ``ValueError`` naming the missing file.
    """
    from dmlkit.report.study import split_folders, study_section

    run_folders, studies = split_folders(run_dirs)
    if not run_dirs:
        load_runs(run_dirs)  # its error: at least one folder
    studies_html = "".join(study_section(s, _e, _table, _figure) for s in studies)
    if not run_folders:
        text = _page(
            title or f"dmlkit report: {', '.join(s.name for s in studies)}",
            studies_html,
            f"{len(studies)} study folder(s)",
        )
    else:
        runs = load_runs(run_folders)
        text = render_report(runs, title=title, gallery=gallery, queries=queries, k=k)
        text = text.replace("</body></html>\n", studies_html + "</body></html>\n")
    out = Path(out)
    if out.parent != Path(""):
        out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out
