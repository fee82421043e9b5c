"""Protocols: class-disjoint folds, mean ± std tables, multi-seed and fair (k-fold) runs that resume."""

import json
import math
import statistics

import pytest
import torch
import torch.nn.functional as F

from dmlkit.data.splits import class_fold_split
from dmlkit.assemble import embed_run
from dmlkit.evaluation import retrieval_metrics
from dmlkit.protocols import markdown_table, mean_std, run_protocol
from dmlkit.protocols.table import format_mean_std, markdown_grid, summarise
from tests_helpers import TINY_OVERRIDES

QUICK = TINY_OVERRIDES + ["plots=false", "eval.clustering=false"]


def _glyph_train(max_classes):
    from dmlkit.data import create_dataset

    return create_dataset("glyphs", "train", max_classes=max_classes)


@pytest.mark.parametrize("classes, folds", [(24, 4), (10, 4), (7, 3)])
def test_folds_partition_the_classes_contiguously(classes, folds):
    data = _glyph_train(classes)
    held_out = []
    for fold in range(folds):
        rest, held = class_fold_split(data, folds, fold)
        rest_cls, held_cls = set(rest.parent_classes.tolist()), set(held.parent_classes.tolist())
        assert not rest_cls & held_cls
        assert rest_cls | held_cls == set(range(classes))
        assert held.parent_classes.tolist() == list(range(min(held_cls), max(held_cls) + 1))
        held_out.append(held.parent_classes.tolist())
    assert sorted(c for part in held_out for c in part) == list(range(classes))
    sizes = [len(p) for p in held_out]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("folds, fold", [(1, 0), (4, 4), (4, -1), (30, 0)])
def test_bad_folds_are_rejected(folds, fold):
    with pytest.raises(ValueError):
        class_fold_split(_glyph_train(24), folds, fold)


def test_fold_config_is_checked():
    from dmlkit.data.config import DataConfig

    with pytest.raises(ValueError, match="data.folds"):
        DataConfig(folds=1)
    with pytest.raises(ValueError, match="data.fold"):
        DataConfig(folds=4, fold=4)


def test_mean_std_matches_statistics():
    values = [0.1, 0.4, 0.35]
    mean, std = mean_std(values)
    assert mean == pytest.approx(statistics.mean(values))
    assert std == pytest.approx(statistics.stdev(values))
    assert mean_std([0.5]) == (0.5, 0.0)
    assert all(math.isnan(v) for v in mean_std([]))


def test_format_mean_std_and_markdown_grid():
    assert format_mean_std((0.1234, 0.0111)) == "12.34 ± 1.11"
    assert format_mean_std((12.3, 4.56), scale=1.0, digits=0) == "12 ± 5"
    assert format_mean_std((0.01, 0.02), signed=True) == "+1.00 ± 2.00"
    assert format_mean_std(mean_std([])) == "n/a" and format_mean_std(None) == "n/a"
    assert markdown_grid(["a", "b", "c"], [["x", "1", "y"]]) == "| a | b | c |\n|---|---|---|\n| x | 1 | y |\n"
    assert markdown_grid(["a", "b", "c"], [], align="rc").splitlines()[1] == "|---:|:---:|---|"
    with pytest.raises(ValueError, match="align"):
        markdown_grid(["a"], [], align="x")


def test_markdown_table_prints_percent_mean_std():
    stats = summarise(
        [
            {"precision_at_1": 0.5, "mean_average_precision_at_r": 0.2},
            {"precision_at_1": 0.7, "mean_average_precision_at_r": 0.4},
        ]
    )
    table = markdown_table([("run-a", stats)], "thesis")
    lines = table.strip().splitlines()
    assert lines[0] == "| run | P@1 | MAP@R |"
    assert (
        lines[2] == f"| run-a | 60.00 ± {statistics.stdev([50, 70]):.2f} | 30.00 ± {statistics.stdev([20, 40]):.2f} |"
    )
    with pytest.raises(ValueError, match="column set"):
        markdown_table([], "nope")


def test_holdout_protocol_over_two_seeds_and_reuse(tmp_path):
    out = tmp_path / "table"
    table = run_protocol("holdout", ["configs/quickstart.yaml"], out, seeds=[0, 1], overrides=QUICK, columns="all")
    summaries = [json.loads((out / f"quickstart-seed{s}" / "summary.json").read_text()) for s in (0, 1)]
    p1 = [s["test"]["precision_at_1"] for s in summaries]
    mean, std = mean_std(p1)
    assert f"{mean * 100:.2f} ± {std * 100:.2f}" in table
    assert (out / "results.md").read_text() == table
    stamp = (out / "quickstart-seed0" / "summary.json").stat().st_mtime_ns
    assert (
        run_protocol("holdout", ["configs/quickstart.yaml"], out, seeds=[0, 1], overrides=QUICK, columns="all") == table
    )
    assert (out / "quickstart-seed0" / "summary.json").stat().st_mtime_ns == stamp  # reused, not retrained


def test_a_changed_config_does_not_reuse_stale_runs(tmp_path):
    run_protocol("holdout", ["configs/quickstart.yaml"], tmp_path, seeds=[0], overrides=QUICK)
    with pytest.raises(ValueError, match="another config"):
        run_protocol("holdout", ["configs/quickstart.yaml"], tmp_path, seeds=[0], overrides=QUICK + ["train.lr=0.01"])


def test_conventional_protocol_validates_on_test(tmp_path):
    run_protocol("conventional", ["configs/quickstart.yaml"], tmp_path, seeds=[0], overrides=QUICK)
    summary = json.loads((tmp_path / "quickstart-seed0" / "summary.json").read_text())
    assert summary["validated_on_test"] is True


def test_fair_protocol_separated_and_concatenated(tmp_path):
    run_protocol("fair", ["configs/quickstart.yaml"], tmp_path, seeds=[0], overrides=QUICK, folds=2)
    result = json.loads((tmp_path / "results.json").read_text())["runs"]["quickstart"]
    runs = [tmp_path / f"quickstart-seed0-fold{k}" for k in range(2)]
    summaries = [json.loads((r / "summary.json").read_text()) for r in runs]
    for r, s in zip(runs, summaries):
        assert not s["validated_on_test"]
    separated = result["separated"][0]
    assert separated["precision_at_1"] == pytest.approx(sum(s["test"]["precision_at_1"] for s in summaries) / 2)
    parts = [embed_run(r) for r in runs]
    joint = F.normalize(torch.cat([F.normalize(e, dim=1) for e, _ in parts], dim=1), dim=1)
    assert joint.shape[1] == 2 * 16
    expected = retrieval_metrics(joint, parts[0][1])
    for key, value in expected.items():
        assert result["concatenated"][0][key] == pytest.approx(value)


def test_unknown_protocol_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="valid"):
        run_protocol("old", ["configs/quickstart.yaml"], tmp_path)


def test_reuse_only_tabulates_finished_runs_and_parallel_jobs_fill_them(tmp_path):
    table = run_protocol("holdout", ["configs/quickstart.yaml"], tmp_path, seeds=[0, 1], overrides=QUICK, reuse=True)
    assert "quickstart (n=0) | n/a" in table
    assert not (tmp_path / "quickstart-seed0").exists()
    table = run_protocol("holdout", ["configs/quickstart.yaml"], tmp_path, seeds=[0, 1], overrides=QUICK, jobs=2)
    assert "quickstart (n=2)" in table
    assert all((tmp_path / f"quickstart-seed{s}" / "summary.json").is_file() for s in (0, 1))
    assert (
        run_protocol("holdout", ["configs/quickstart.yaml"], tmp_path, seeds=[0, 1], overrides=QUICK, reuse=True)
        == table
    )


def test_runs_written_before_a_new_config_key_are_still_reused(tmp_path):
    run_protocol("holdout", ["configs/quickstart.yaml"], tmp_path, seeds=[0], overrides=QUICK)
    saved = tmp_path / "quickstart-seed0" / "config.yaml"
    saved.write_text("".join(line for line in saved.read_text().splitlines(True) if "reference_split" not in line))
    stamp = (tmp_path / "quickstart-seed0" / "summary.json").stat().st_mtime_ns
    run_protocol("holdout", ["configs/quickstart.yaml"], tmp_path, seeds=[0], overrides=QUICK)
    assert (tmp_path / "quickstart-seed0" / "summary.json").stat().st_mtime_ns == stamp


def test_a_single_value_is_printed_without_a_spread_where_asked():
    import math

    from dmlkit.protocols.table import format_mean_std, summarise

    one = [{"seed": 0, "m": 0.5}]
    assert format_mean_std(summarise(one)["m"]) == "50.00 ± 0.00"  # the papers' tables: n=1 shows ± 0
    assert format_mean_std(summarise(one, single_std=math.nan)["m"]) == "50.00"  # floors: the value alone
    two = [{"seed": 0, "m": 0.5}, {"seed": 1, "m": 0.7}]
    assert format_mean_std(summarise(two, single_std=math.nan)["m"]) == "60.00 ± 14.14"


def test_a_method_fact_becomes_a_column_of_the_rows_that_report_it():
    """summary["facts"] (CCP's projections) -> a per-seed fact.<name> -> a column with the mean ± std over seeds."""
    from dmlkit.protocols.conventional import seed_metrics
    from dmlkit.protocols.results import run_columns

    def summary(projections=None):
        base = {"steps": 100, "best_step": 50, "train_seconds": 2.0, "test": {"precision_at_1": 0.5}}
        return base if projections is None else {**base, "facts": {"projections": projections}}

    plain = summarise([seed_metrics(summary()), seed_metrics(summary())])
    ccp = summarise([seed_metrics(summary(2)), seed_metrics(summary(4))])
    assert ccp["fact.projections"] == (3.0, pytest.approx(math.sqrt(2)))
    assert "fact.projections" not in plain
    columns = run_columns([("plain", plain), ("ccp", ccp)])
    assert columns[-1] == ("projections", "fact.projections", 1)
    assert run_columns([("plain", plain)]) == run_columns([])  # no fact, no column
    table = markdown_table([("plain", plain), ("ccp", ccp)], "thesis", extra=columns).splitlines()
    assert table[0].endswith("| projections |")
    assert table[2].endswith("| n/a |") and table[3].endswith("| 3.0 ± 1.4 |")
