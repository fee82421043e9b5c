"""Reality Check's test step after a search: the best values on the test classes, which no trial saw.

With the fair protocol, the best trial's fold models are tested as they are, separately (their metrics averaged,
"128-d" in the thesis' tables) and concatenated ("512-d"); then ``best.yaml`` is trained again on fresh seeds
(the holdout protocol) and reported as mean ± std and a 95% interval of the mean (Student's t). Written to
``STUDY/test.md`` (and the retrained runs to ``STUDY/test/``).
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, Sequence

__all__ = ["test_best"]

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (then the normal's 1.96).
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)
METRICS = ("precision_at_1", "mean_average_precision_at_r")


def interval95(values: Sequence[float]) -> tuple[float, float]:
    """``(mean, half-width)`` of the 95% confidence interval of the mean of ``values`` (half-width 0 for one)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    t = _T975[len(values) - 2] if len(values) - 1 <= len(_T975) else 1.96
    return mean, t * statistics.stdev(values) / math.sqrt(len(values))


def _fold_rows(study_dir: Path, best: dict[str, Any], record: dict[str, Any]) -> list[str]:
    from dmlkit.config import load_config
    from dmlkit.protocols.fair import test_fold_models
    from dmlkit.tune.trial_runs import trial_folder

    trial_dir = study_dir / trial_folder(best["run"])
    run_dirs = sorted(trial_dir.glob("fold*"), key=lambda p: int(p.name.removeprefix("fold")))
    cfg = load_config(run_dirs[0] / "config.yaml", stored=True)
    separated, concatenated = test_fold_models(
        run_dirs, cfg.eval.split, cfg.eval.reference_split, cfg.eval.ks, False, cfg.seed
    )
    size = cfg.model.embedding_dim
    return [
        f"| best trial's {len(run_dirs)} fold models, separated ({size}-d) | "
        + " | ".join(f"{100 * separated[m]:.2f}" for m in METRICS)
        + " |",
        f"| concatenated ({len(run_dirs) * size}-d) | "
        + " | ".join(f"{100 * concatenated[m]:.2f}" for m in METRICS)
        + " |",
    ]


def _seed_rows(study_dir: Path, seeds: Sequence[int], jobs: int, quiet: bool) -> list[str]:
    from dmlkit.protocols import run_protocol

    out = study_dir / "test"
    run_protocol("holdout", [study_dir / "best.yaml"], out, seeds=seeds, jobs=jobs, quiet=quiet)
    runs = json.loads((out / "results.json").read_text())["runs"]
    per_seed = next(iter(runs.values()))
    cells = []
    for metric in METRICS:
        values = [100 * r[metric] for r in per_seed]
        mean, half = interval95(values)
        cells.append(
            f"{mean:.2f} ± {statistics.stdev(values) if len(values) > 1 else 0:.2f} [{mean - half:.2f}, {mean + half:.2f}]"
        )
    return [
        f"| best.yaml retrained, seeds {' '.join(str(r['seed']) for r in per_seed)} (mean ± std [95% interval]) | "
        + " | ".join(cells)
        + " |"
    ]


def test_best(
    study_dir: Path,
    best: dict[str, Any],
    record: dict[str, Any],
    seeds: Sequence[int],
    jobs: int = 1,
    quiet: bool = True,
) -> str:
    """Test the study's best values; write and return ``test.md``."""
    rows = _fold_rows(study_dir, best, record) if record["protocol"] == "fair" else []
    if seeds:
        rows += _seed_rows(study_dir, seeds, jobs, quiet)
    text = (
        f"Test of the best trial ({best['trial']}) of {study_dir.name}, test classes, metrics in %\n\n"
        "| | P@1 | MAP@R |\n|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    (study_dir / "test.md").write_text(text)
    return text
