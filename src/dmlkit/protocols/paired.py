"""Paired differences between a method and its baseline over the same seeds.

Seed-to-seed spread on small benchmarks is often larger than the effect of a method
(the SFT rows on glyphs: MAP@R std 1-4 points for +1-2 point effects), so a table of
means alone cannot say whether a method helps. Runs that share a seed share the data
split, the initial weights and the sampler order, so the difference of a method and
its baseline *on the same seed* removes most of that spread:

    d_s = m(method, seed s) - m(baseline, seed s),   reported as mean_s d_s ± std_s d_s  (k/n)

where ``k/n`` counts the seeds with ``d_s > 0`` among the ``n`` seeds both runs finished.

Baselines are chosen by name, so the order of the configs (a shell glob's, which depends
on the locale) does not matter: each run is paired with the baseline whose name is the
longest prefix of its own (``triplet_sft`` with ``triplet``, ``npair_sft_d`` with ``npair``);
with a single baseline, every other run is paired with it. A pair the names do not tell is
written out, ``RUN=BASELINE`` (``ccp=ms_validated``); it wins over the prefix rule, and when only
such pairs are given the other runs get no baseline.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from dmlkit.protocols.table import SEED_KEY, check_columns, format_mean_std, markdown_grid, mean_std


def explicit_pairs(baselines: Sequence[str]) -> dict[str, str]:
    """``{run: baseline}`` of the ``RUN=BASELINE`` entries of ``baselines``."""
    pairs: dict[str, str] = {}
    for entry in baselines:
        if "=" not in entry:
            continue
        run, _, base = entry.partition("=")
        if not run or not base or "=" in base:
            raise ValueError(f"baseline pair '{entry}' must read RUN=BASELINE (two config names)")
        if run == base:
            raise ValueError(f"baseline pair '{entry}' pairs a run with itself; name another run as its baseline")
        if pairs.get(run, base) != base:
            raise ValueError(f"run '{run}' is given two baselines ({pairs[run]}, {base}); keep one")
        pairs[run] = base
    return pairs


def assign_baselines(names: Sequence[str], baselines: Sequence[str]) -> dict[str, str]:
    """``{run: baseline}``: a ``RUN=BASELINE`` entry's pair, else the baseline whose name is the longest prefix of
    the run's (the only one, if one)."""
    explicit = explicit_pairs(baselines)
    plain = [b for b in baselines if "=" not in b]
    unknown = [b for b in dict.fromkeys([*plain, *explicit, *explicit.values()]) if b not in names]
    if unknown:
        raise ValueError(
            f"baseline(s) {', '.join(unknown)} are not among the runs of this table; give a config name "
            f"(valid: {', '.join(names)})"
        )
    pairs: dict[str, str] = {}
    for name in names:
        if name in explicit:
            pairs[name] = explicit[name]
            continue
        if name in plain or not plain:
            continue
        prefixed = [b for b in plain if name.startswith(b)]
        if prefixed:
            pairs[name] = max(prefixed, key=len)
        elif len(plain) == 1:
            pairs[name] = plain[0]
        elif name in explicit.values():
            continue  # the baseline of a named pair, with no baseline of its own among the plain ones
        else:
            raise ValueError(
                f"no baseline name is a prefix of '{name}' (baselines: {', '.join(plain)}); name each run "
                f"<baseline>..., give one baseline to compare every run with, or pair it: {name}=BASELINE"
            )
    return pairs


def _by_seed(per_seed: Sequence[dict[str, float]]) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for entry in per_seed:
        if SEED_KEY not in entry:
            raise ValueError("per-seed metrics carry no 'seed'; paired differences need the seed of every run")
        out[int(entry[SEED_KEY])] = entry
    return out


def paired_difference(
    method: Sequence[dict[str, float]], baseline: Sequence[dict[str, float]], keys: Sequence[str]
) -> dict[str, Any]:
    """``{"n": seeds paired, "seeds": [...], "diff": {key: (mean, std)}, "wins": {key: k}, "deltas": {key: [...]}}``
    of method - baseline (``deltas``: the per-seed differences, in seed order).

    Only seeds that both lists hold are paired; ``std`` is the sample std of the
    per-seed differences (0 for one seed), ``wins`` the number of seeds with a positive difference.
    """
    m, b = _by_seed(method), _by_seed(baseline)
    seeds = sorted(set(m) & set(b))
    diff: dict[str, tuple[float, float]] = {}
    wins: dict[str, int] = {}
    per_seed: dict[str, list[float]] = {}
    for key in keys:
        deltas = [m[s][key] - b[s][key] for s in seeds if key in m[s] and key in b[s]]
        diff[key] = mean_std(deltas)
        wins[key] = sum(d > 0 for d in deltas)
        per_seed[key] = deltas
    return {"n": len(seeds), "seeds": seeds, "diff": diff, "wins": wins, "deltas": per_seed}


def _diff_cell(stat: tuple[float, float], wins: int, n: int) -> str:
    if n == 0 or math.isnan(stat[0]):
        return "n/a"
    return f"{format_mean_std(stat, signed=True)} ({wins}/{n})"


def paired_table(rows: Sequence[tuple[str, str, dict[str, Any]]], columns: str) -> str:
    """Markdown table of ``(run, baseline, paired_difference(...))`` rows, in points (percent)."""
    cols = check_columns(columns)
    headers = ["run", "baseline", "n"] + [h for h, _ in cols]
    cells = [
        [run, base, str(result["n"])]
        + [_diff_cell(result["diff"][key], result["wins"][key], result["n"]) for _, key in cols]
        for run, base, result in rows
    ]
    return markdown_grid(headers, cells)
