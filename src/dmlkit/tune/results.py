"""A study's results in its folder: the trials table, ``best.yaml``, and the figures.

- ``trials.md`` / ``trials.csv``: one row per counted trial: its values, the objective (in % for the table),
  its standard error over folds, steps, best step, state, training time and, for a failed trial, why.
- ``best.yaml``: the config with the best trial's values, ready for ``dmlkit train`` or ``dmlkit protocol``;
  ``best_values.yaml``: the tuned keys alone, a layer to put last in another config's ``base:`` list (a method
  added to the tuned baseline, another regime);
  ``best.json``: the best trial's number, value, standard error and values, with each key's fANOVA
  importance and Spearman rank correlation with the objective (``tune.importance``).
- ``best_so_far.png``: every trial's value and the best so far against the trial number;
  ``importances.png``: the fANOVA importance of each key (with two or more keys); both with the
  'plots' extra (matplotlib) installed.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import yaml

from dmlkit.tune.importance import key_importances, rank_correlations
from dmlkit.tune.space import overrides_of

__all__ = ["trial_rows", "write_results"]


def trial_rows(trials: list[Any], keys: list[str]) -> list[dict[str, Any]]:
    """The counted trials as rows of plain values, in trial order."""
    from dmlkit.tune.workers import counted_trials, origin_number

    rows = []
    for trial in sorted(counted_trials(trials), key=lambda t: t.number):
        attrs = trial.user_attrs
        rows.append(
            {
                "trial": trial.number,
                "run": origin_number(trial),
                "state": trial.state.name.lower(),
                "value": trial.value,
                "sem": attrs.get("sem"),
                **{key: trial.params.get(key) for key in keys},
                "steps": attrs.get("steps"),
                "best_step": attrs.get("best_steps"),
                "train_seconds": attrs.get("train_seconds"),
                "pruned_at": max(trial.intermediate_values)
                if trial.state.name == "PRUNED" and trial.intermediate_values
                else None,
                "reason": attrs.get("fail_reason", ""),
            }
        )
    return rows


def _cell(value: Any, percent: bool = False) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, float):
        return f"{100 * value:.2f}" if percent else f"{value:.4g}"
    if isinstance(value, list):
        return " ".join(map(str, value))
    return str(value)


def _markdown(rows: list[dict[str, Any]], metric: str) -> str:
    if not rows:
        return "no trials yet\n"
    headers = list(rows[0])
    lines = [
        "| "
        + " | ".join(f"{metric} (%)" if h == "value" else ("SEM (%)" if h == "sem" else h) for h in headers)
        + " |",
        "|" + "---|" * len(headers),
    ]
    for row in rows:
        lines.append("| " + " | ".join(_cell(v, percent=k in ("value", "sem")) for k, v in row.items()) + " |")
    return "\n".join(lines) + "\n"


def _best_config(record: dict[str, Any], best_params: dict[str, Any]) -> str:
    from dmlkit.config import dump_config, load_config

    cfg = load_config(
        record["config_path"],
        [*record["overrides"], *overrides_of(best_params), f"name={record['config'].get('name', 'experiment')}-tuned"],
    )
    return dump_config(cfg)


def _values_layer(params: dict[str, Any]) -> str:
    """The tuned keys alone, nested as in a config file: ``base: [method.yaml, STUDY/best_values.yaml]`` trains
    ``method.yaml`` at the study's values (``base:`` merges key by key, so nothing else of it changes)."""
    from dmlkit.config import apply_overrides

    return yaml.safe_dump(apply_overrides({}, overrides_of(params)), sort_keys=False)


def _can_plot() -> bool:
    """The figures need the 'plots' extra; without it a study writes its tables only."""
    from dmlkit.extras import installed

    return installed("matplotlib")


def _best_so_far_figure(rows: list[dict[str, Any]], metric: str, out: Path) -> None:
    if not _can_plot():
        return
    from dmlkit.viz.tune_plots import best_so_far_figure

    done = [(r["trial"], r["value"]) for r in rows if r["value"] is not None]
    if done:
        best_so_far_figure(done, metric, out)


def write_results(study: Any, study_dir: Path, record: dict[str, Any], keys: list[str]) -> dict[str, Any] | None:
    """Write the results files; returns the best trial's record (None before any trial completed)."""
    from optuna.trial import TrialState

    from dmlkit.tune.workers import origin_number

    metric = record["metric"]
    trials = study.get_trials(deepcopy=False)  # one read of the storage (a database query with --storage)
    rows = trial_rows(trials, keys)
    (study_dir / "trials.md").write_text(_markdown(rows, metric))
    with open(study_dir / "trials.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["trial"])
        writer.writeheader()
        writer.writerows([{k: _cell(v) if isinstance(v, list) else v for k, v in row.items()} for row in rows])
    _best_so_far_figure(rows, metric, study_dir / "best_so_far.png")
    if not any(t.state == TrialState.COMPLETE for t in trials):
        return None
    best = study.best_trial
    importances = key_importances(study)
    if importances and _can_plot():
        from dmlkit.viz.tune_plots import importance_figure

        importance_figure(importances, study_dir / "importances.png")
    summary = {
        "trial": best.number,
        "run": origin_number(best),
        "value": best.value,
        "sem": best.user_attrs.get("sem"),
        "metric": metric,
        "params": best.params,
        "importances": importances,
        "rank_correlations": rank_correlations(trials, keys),
        "trials": {s: sum(r["state"] == s for r in rows) for s in ("complete", "pruned", "fail", "running")},
    }
    (study_dir / "best.json").write_text(json.dumps(summary, indent=2) + "\n")
    header = (
        f"# dmlkit tune: trial {best.number} of {study_dir}, {metric} {best.value:.4f} on the validation classes\n"
        f"# values: {json.dumps(best.params)}\n"
    )
    (study_dir / "best.yaml").write_text(header + _best_config(record, best.params))
    layer_header = header + "# the tuned keys alone: put this file last in another config's base: list\n"
    (study_dir / "best_values.yaml").write_text(layer_header + _values_layer(best.params))
    return summary
