"""The embedding geometry of several finished runs side by side: SFT paper Fig. 4a and Eq. 8, seeds paired.

``dmlkit geometry RUN_DIR ... --baseline NAME --out DIR`` (:func:`compare_geometry`) embeds the
split ``--split`` (default ``train``: the training classes, as the paper's Fig. 4a, which shows
how training shaped the classes it saw) with each run's best checkpoint, in the space the loss
compared (``LoadedRun.features``: for SFT-d the L2-normalised embedding), and computes

* ``r_w`` of Eq. 8 (energy 0.99 of the class means, the figure the paper quotes in Sec. 4.4) and
  its curve against the energy kept (Fig. 6c);
* the divergence of every class, ``trace(S_{w,k})`` of Eq. 11, and its mean, standard deviation
  and coefficient of variation over the classes (Fig. 4a right: "the standard deviation of
  divergences"; the paper's claim is that SFT makes divergences *more balanced*).

Runs are grouped as ``dmlkit report`` groups them, except that the config ``name`` counts (equal
configs but for the seed and ``output_dir``; a group is named by its config ``name``) and each group is paired with
the baseline group on the seed: differences ``run - baseline`` per seed, then mean and sample
std over the paired seeds.

Fig. 4a sorts the classes by the baseline's divergence and draws the other model's divergence
of the same classes. Sorting by one noisy measurement and plotting another always shows
"regression to the mean" (classes that were low come out higher, high ones lower) even when
the two models are the same. :func:`fig4a_curves` therefore also draws a **control**: the
baseline of another seed (seed ``s`` against the next baseline seed, cyclically), sorted by the
baseline of seed ``s``. SFT balances the divergences only as far as its curve is flatter than
the control's; the std / CV over classes is the figure without this bias.

Nothing is written into the run folders: the per-run numbers are cached in ``DIR/cache/``
(keyed by the checkpoint's path, size and mtime and the split) and reused on the next call.
Written: ``geometry.json``, ``geometry.md``, ``geometry_r_w.png``, ``geometry_divergences.png``.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from dmlkit_lab.evaluation.geometry import class_divergences, r_w_curve, scatter_matrices
from dmlkit.io import write_json_atomic, write_text_atomic

__all__ = [
    "ENERGIES",
    "R_W_ENERGY",
    "RunGeometry",
    "compare_geometry",
    "fig4a_curves",
    "geometry_markdown",
    "geometry_summary",
    "pair_by_seed",
    "paired_differences",
    "run_geometry",
    "run_geometry_from_embeddings",
    "sort_by_baseline",
]

#: Energy fraction of the class means at which ``r_w`` is reported (Sec. 4.4: "99% energy of mu").
R_W_ENERGY = 0.99
#: Energies of the ``r_w`` curve (Fig. 6c).
ENERGIES = (0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999)
_CACHE_VERSION = 2


@dataclass
class RunGeometry:
    """The geometry of one run's embedding of one split: ``r_w`` and the per-class divergences."""

    group: str
    seed: int
    path: str
    split: str
    r_w: float
    r_w_curve: dict[str, float]  # energy (as a string, JSON keys) -> r_w
    classes: list[int]  # labels, sorted
    divergences: list[float]  # trace(S_{w,k}) of Eq. 11, one per entry of ``classes``
    r_w_dims: int = 0  # k: eigenvectors of S_c that hold R_W_ENERGY of its energy (the U of Eq. 8)
    dim: int = 0  # d of the embedding; isotropic deviations would give r_w = k / d

    @property
    def divergence_mean(self) -> float:
        return sum(self.divergences) / len(self.divergences)

    @property
    def divergence_std(self) -> float:
        """Population std over the classes (``correction=0``, as ``geometry_report``)."""
        m = self.divergence_mean
        return math.sqrt(sum((d - m) ** 2 for d in self.divergences) / len(self.divergences))

    @property
    def divergence_cv(self) -> float:
        """``std / mean`` of the divergences: their balance, free of the overall scale."""
        return self.divergence_std / self.divergence_mean if self.divergence_mean > 0 else float("nan")


def run_geometry_from_embeddings(
    embeddings: torch.Tensor, labels: torch.Tensor, group: str = "", seed: int = 0, path: str = "", split: str = ""
) -> RunGeometry:
    """``r_w`` (Eq. 8) and per-class divergences (Eq. 11) of ``(N, d)`` embeddings, with classes in sorted label order."""
    curve = r_w_curve(embeddings, labels, sorted(set(ENERGIES) | {R_W_ENERGY}))
    classes = torch.unique(torch.as_tensor(labels)).tolist()  # class_divergences codes labels in this order
    div = class_divergences(embeddings, labels).tolist()
    s_c, _ = scatter_matrices(embeddings, labels)
    ev = torch.linalg.eigvalsh(s_c).flip(0).clamp_min(0)
    dims = int(torch.searchsorted(torch.cumsum(ev, 0) / ev.sum(), torch.tensor(R_W_ENERGY, dtype=ev.dtype) - 1e-12)) + 1
    return RunGeometry(
        group,
        int(seed),
        path,
        split,
        curve[R_W_ENERGY],
        {str(k): v for k, v in curve.items()},
        [int(c) for c in classes],
        div,
        min(dims, s_c.shape[0]),
        int(s_c.shape[0]),
    )


def _cache_key(checkpoint: Path, split: str) -> str:
    st = checkpoint.stat()
    raw = f"{_CACHE_VERSION}|{checkpoint.resolve()}|{st.st_size}|{st.st_mtime_ns}|{split}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def run_geometry(
    run_dir: str | Path, split: str = "train", group: str = "", cache_dir: str | Path | None = None
) -> RunGeometry:
    """The geometry of ``run_dir``'s best checkpoint on ``split`` (read from ``cache_dir`` when computed before).

    Embeds with ``LoadedRun.features`` (the space the loss compared) and writes nothing into the run folder.
    """
    from dmlkit.assemble import load_finished_run, resolve_checkpoint
    from dmlkit.engine.embed import embed_dataset

    _, checkpoint = resolve_checkpoint(run_dir)
    cache = Path(cache_dir) / f"{Path(run_dir).name}-{_cache_key(checkpoint, split)}.json" if cache_dir else None
    if cache is not None and cache.is_file():
        values = json.loads(cache.read_text())
        values["group"] = group
        return RunGeometry(**values)
    run = load_finished_run(run_dir)
    embeddings, labels = embed_dataset(run.features, run.split(split), run.cfg.eval.batch_size)
    geo = run_geometry_from_embeddings(embeddings, labels, group, run.cfg.seed, str(run_dir), split)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(cache, asdict(geo))
    return geo


def pair_by_seed(
    baseline: Sequence[RunGeometry], other: Sequence[RunGeometry]
) -> list[tuple[int, RunGeometry, RunGeometry]]:
    """``(seed, baseline run, other run)`` for every seed both groups have, by increasing seed.

    A seed present twice in one group is an error: which of the repeats to pair would be a guess.
    """

    def by_seed(runs: Sequence[RunGeometry]) -> dict[int, RunGeometry]:
        seen: dict[int, RunGeometry] = {}
        for r in runs:
            if r.seed in seen:
                raise ValueError(
                    f"seed {r.seed} appears twice in group '{r.group}' ({seen[r.seed].path}, {r.path}); "
                    "pass one run per seed"
                )
            seen[r.seed] = r
        return seen

    a, b = by_seed(baseline), by_seed(other)
    return [(s, a[s], b[s]) for s in sorted(set(a) & set(b))]


def sort_by_baseline(baseline: RunGeometry, other: RunGeometry) -> tuple[list[int], list[float], list[float]]:
    """Fig. 4a order: ``(classes, baseline divergences, other's divergences)`` by increasing baseline divergence.

    The two runs must hold the same classes (same split); ties keep label order.
    """
    if baseline.classes != other.classes:
        raise ValueError(
            f"'{baseline.path}' and '{other.path}' hold different classes "
            f"({len(baseline.classes)} vs {len(other.classes)}); compare runs embedded on the same split"
        )
    order = sorted(range(len(baseline.classes)), key=lambda i: (baseline.divergences[i], baseline.classes[i]))
    return (
        [baseline.classes[i] for i in order],
        [baseline.divergences[i] for i in order],
        [other.divergences[i] for i in order],
    )


def fig4a_curves(baseline: Sequence[RunGeometry], other: Sequence[RunGeometry]) -> dict[str, Any]:
    """Rank-wise means over the paired seeds of the Fig. 4a curves, with the seed-to-seed control.

    For each paired seed ``s`` the classes are ordered by the baseline of seed ``s``; at each rank
    the result holds the mean over seeds of the baseline's divergence (``baseline``), of the other
    run's divergence of the same class (``other``) and, where the baseline has another seed, of the
    next baseline seed's (cyclically; ``control``). ``below_up`` / ``above_down``: the share of
    classes below the baseline's mean whose divergence rose and of those above whose divergence
    fell (the paper's reading of Fig. 4a), for the other run and for the control.
    """
    pairs = pair_by_seed(baseline, other)
    if not pairs:
        raise ValueError("the two groups share no seed; Fig. 4a pairs runs of the same seed")
    base_seeds = sorted(r.seed for r in baseline)
    by_seed = {r.seed: r for r in baseline}
    rows_base, rows_other, rows_ctrl = [], [], []
    share = {"other": [0, 0, 0, 0], "control": [0, 0, 0, 0]}  # below & up, below, above & down, above
    for seed, b, o in pairs:
        _, bs, os_ = sort_by_baseline(b, o)
        rows_base.append(bs)
        rows_other.append(os_)
        curves = {"other": os_}
        if len(base_seeds) > 1:
            nxt = by_seed[base_seeds[(base_seeds.index(seed) + 1) % len(base_seeds)]]
            _, _, cs = sort_by_baseline(b, nxt)
            rows_ctrl.append(cs)
            curves["control"] = cs
        mean = sum(bs) / len(bs)
        for name, values in curves.items():
            for x, y in zip(bs, values):
                if x < mean:
                    share[name][1] += 1
                    share[name][0] += y > x
                else:
                    share[name][3] += 1
                    share[name][2] += y < x

    def rank_mean(rows: list[list[float]]) -> list[float]:
        return [sum(col) / len(col) for col in zip(*rows)] if rows else []

    def frac(a: int, n: int) -> float | None:
        return a / n if n else None

    return {
        "seeds": [s for s, _, _ in pairs],
        "baseline": rank_mean(rows_base),
        "other": rank_mean(rows_other),
        "control": rank_mean(rows_ctrl),
        "below_up": {k: frac(v[0], v[1]) for k, v in share.items() if v[1] or v[3]},
        "above_down": {k: frac(v[2], v[3]) for k, v in share.items() if v[1] or v[3]},
    }


_STATS = ("r_w", "divergence_mean", "divergence_std", "divergence_cv")


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    m = sum(values) / len(values)
    s = math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return m, s


def paired_differences(baseline: Sequence[RunGeometry], other: Sequence[RunGeometry]) -> dict[str, Any]:
    """Per seed ``other - baseline`` of r_w and the divergence statistics; mean and sample std over seeds."""
    pairs = pair_by_seed(baseline, other)
    out: dict[str, Any] = {"seeds": [s for s, _, _ in pairs]}
    for stat in _STATS:
        diffs = [getattr(o, stat) - getattr(b, stat) for _, b, o in pairs]
        m, s = _mean_std(diffs) if diffs else (float("nan"), float("nan"))
        out[stat] = {"per_seed": diffs, "mean": m, "std": s, "positive": sum(d > 0 for d in diffs)}
    return out


def geometry_summary(groups: dict[str, list[RunGeometry]], baseline: str) -> dict[str, Any]:
    """Per group: the statistics per seed and their mean / sample std; paired differences to ``baseline``."""
    if baseline not in groups:
        raise ValueError(f"baseline '{baseline}' is not one of the groups: {', '.join(groups)}")
    summary: dict[str, Any] = {"baseline": baseline, "r_w_energy": R_W_ENERGY, "groups": {}}
    for name, runs in groups.items():
        runs = sorted(runs, key=lambda r: r.seed)
        entry: dict[str, Any] = {
            "seeds": [r.seed for r in runs],
            "split": sorted({r.split for r in runs}),
            "runs": [r.path for r in runs],
            "classes": len(runs[0].classes),
            "r_w_dims": [r.r_w_dims for r in runs],
            "dim": runs[0].dim,
        }
        for stat in _STATS:
            values = [getattr(r, stat) for r in runs]
            m, s = _mean_std(values)
            entry[stat] = {"per_seed": values, "mean": m, "std": s}
        curve_keys = list(runs[0].r_w_curve)
        entry["r_w_curve"] = {k: _mean_std([r.r_w_curve[k] for r in runs])[0] for k in curve_keys}
        if name != baseline:
            entry["paired"] = paired_differences(groups[baseline], runs)
            fig = fig4a_curves(groups[baseline], runs)
            entry["fig4a"] = {"below_up": fig["below_up"], "above_down": fig["above_down"]}
        summary["groups"][name] = entry
    return summary


def geometry_markdown(summary: dict[str, Any]) -> str:
    """The summary as two markdown tables (per group; paired against the baseline)."""
    groups = summary["groups"]
    split = ", ".join(sorted({s for g in groups.values() for s in g["split"]}))
    lines = [
        f"Split: {split}; r_w at energy {summary['r_w_energy']}; divergence = trace(S_w,k) (Eq. 11), "
        "mean / std / CV over the classes; mean ± sample std over seeds. "
        "k / d: eigenvectors of S_c in U (range over seeds) / embedding size; isotropic deviations give r_w = k / d.",
        "",
        "| run | n | r_w | k / d | divergence mean | divergence std | divergence CV |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, g in groups.items():
        cells = [f"{g[s]['mean']:.4f} ± {g[s]['std']:.4f}" for s in _STATS]
        k = sorted(set(g["r_w_dims"]))
        cells.insert(1, f"{'-'.join(str(v) for v in sorted({k[0], k[-1]}))} / {g['dim']}")
        lines.append(f"| {name} | {len(g['seeds'])} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Paired against `{summary['baseline']}` on the same seed: mean ± std of (run - baseline), "
        "(seeds where run > baseline / seeds paired); Fig. 4a shares: classes below the baseline's mean "
        "whose divergence rose / above it that fell, run (control: another baseline seed).",
        "",
        "| run | n | Δ r_w | Δ divergence mean | Δ divergence std | Δ divergence CV | below ↑ | above ↓ |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, g in groups.items():
        if "paired" not in g:
            continue
        p = g["paired"]
        n = len(p["seeds"])
        cells = [f"{p[s]['mean']:+.4f} ± {p[s]['std']:.4f} ({p[s]['positive']}/{n})" for s in _STATS]
        shares = []
        for key in ("below_up", "above_down"):
            v = g["fig4a"][key]
            ctrl = f" ({v['control']:.0%})" if v.get("control") is not None else ""
            shares.append(f"{v['other']:.0%}{ctrl}")
        lines.append(f"| {name} | {n} | " + " | ".join(cells + shares) + " |")
    return "\n".join(lines) + "\n"


def _group_names(run_dirs: Sequence[str | Path]) -> list[tuple[str, list[Path]]]:
    from dmlkit.report.runs import group_runs, load_runs

    grouped = group_runs(load_runs(run_dirs), ignore=("seed", "output_dir"))  # the config name is the group's label
    names = [str(members[0].config.get("name", label)) for label, members in grouped]
    if len(set(names)) < len(names):
        names = [label for label, _ in grouped]
    return [(name, [m.path for m in members]) for name, (_, members) in zip(names, grouped)]


def compare_geometry(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    baseline: str | None = None,
    split: str = "train",
    plots: bool = True,
) -> dict[str, Any]:
    """Compute (or read from ``out/cache``) every run's geometry, write the tables and figures to ``out``."""
    grouped = _group_names(run_dirs)
    base = baseline if baseline is not None else grouped[0][0]
    if base not in [n for n, _ in grouped]:
        raise ValueError(f"--baseline '{base}' is none of the groups: {', '.join(n for n, _ in grouped)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    groups = {name: [run_geometry(p, split, name, out / "cache") for p in paths] for name, paths in grouped}
    summary = geometry_summary(groups, base)
    summary["fig4a_curves"] = {name: fig4a_curves(groups[base], runs) for name, runs in groups.items() if name != base}
    write_json_atomic(out / "geometry.json", summary)
    write_text_atomic(out / "geometry.md", geometry_markdown(summary))
    if plots:
        from dmlkit_lab.viz.geometry_compare import plot_divergences, plot_r_w

        title = f"{split} split"
        plot_r_w(summary, out / "geometry_r_w.png", title)
        plot_divergences(summary, out / "geometry_divergences.png", title)
    return summary
