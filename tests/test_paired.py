"""Paired differences against a baseline: pairing by seed, baselines by position, the protocol table."""

import json
import math
import statistics

import pytest

from dmlkit.protocols import run_protocol
from dmlkit.protocols.paired import assign_baselines, paired_difference, paired_table
from tests_helpers import TINY_OVERRIDES

QUICK = TINY_OVERRIDES + ["plots=false", "eval.clustering=false"]


def test_each_run_is_paired_with_the_baseline_its_name_extends_in_any_order():
    names = ["triplet_sft", "npair", "triplet", "triplet_translation", "npair_sft", "npair_sft_d"]
    assert assign_baselines(names, ["triplet", "npair", "npair_sft"]) == {
        "triplet_sft": "triplet",
        "triplet_translation": "triplet",
        "npair_sft_d": "npair_sft",
    }
    assert assign_baselines(names, ["triplet"])["npair_sft"] == "triplet"  # one baseline: compared with every run
    assert assign_baselines(names, []) == {}


def test_an_explicit_pair_wins_over_the_prefix_rule_and_alone_pairs_only_itself():
    names = ["ms", "ms_val", "ms_ccp", "ms_ccp_patience1", "ms_gsp"]
    # by prefix, ms_ccp would pair with ms and ms_ccp_patience1 with ms too: the explicit pairs win
    assert assign_baselines(names, ["ms", "ms_ccp=ms_val", "ms_ccp_patience1=ms_val"]) == {
        "ms_val": "ms",
        "ms_ccp": "ms_val",
        "ms_ccp_patience1": "ms_val",
        "ms_gsp": "ms",
    }
    assert assign_baselines(names, ["ms_ccp=ms_val"]) == {"ms_ccp": "ms_val"}  # only pairs: the rest unpaired
    # a pair's baseline that no plain baseline prefixes is a baseline, not a run without one
    names = ["triplet", "triplet_gsp", "c2", "c2_gsp", "val", "ccp"]
    assert assign_baselines(names, ["triplet", "c2", "ccp=val"]) == {
        "triplet_gsp": "triplet",
        "c2_gsp": "c2",
        "ccp": "val",
    }
    with pytest.raises(ValueError, match="no baseline name is a prefix of 'val'"):  # without the pair, it is a run
        assign_baselines(names, ["triplet", "c2"])


def test_bad_explicit_pairs_name_the_problem():
    names = ["a", "b", "c"]
    with pytest.raises(ValueError, match="not among the runs.*valid: a, b, c"):
        assign_baselines(names, ["a=z"])
    with pytest.raises(ValueError, match="not among the runs"):
        assign_baselines(names, ["z=a"])
    with pytest.raises(ValueError, match="pairs a run with itself"):
        assign_baselines(names, ["a=a"])
    with pytest.raises(ValueError, match="two baselines"):
        assign_baselines(names, ["a=b", "a=c"])
    with pytest.raises(ValueError, match="must read RUN=BASELINE"):
        assign_baselines(names, ["=b"])
    assert assign_baselines(names, ["a=b", "a=b"]) == {"a": "b"}  # the same pair twice is one pair


def test_bad_baselines_name_the_problem():
    with pytest.raises(ValueError, match="not among the runs.*valid: a, b"):
        assign_baselines(["a", "b"], ["c"])
    with pytest.raises(ValueError, match="no baseline name is a prefix of 'c'"):
        assign_baselines(["a", "b", "c"], ["a", "b"])


def test_paired_difference_pairs_only_common_seeds():
    method = [{"seed": 0, "m": 0.50}, {"seed": 1, "m": 0.40}, {"seed": 2, "m": 0.70}, {"seed": 5, "m": 0.9}]
    base = [{"seed": 2, "m": 0.60}, {"seed": 0, "m": 0.45}, {"seed": 1, "m": 0.42}, {"seed": 3, "m": 0.1}]
    result = paired_difference(method, base, ["m"])
    deltas = [0.50 - 0.45, 0.40 - 0.42, 0.70 - 0.60]
    assert result["n"] == 3 and result["seeds"] == [0, 1, 2]
    assert result["diff"]["m"][0] == pytest.approx(statistics.mean(deltas))
    assert result["diff"]["m"][1] == pytest.approx(statistics.stdev(deltas))
    assert result["wins"]["m"] == 2


def test_paired_difference_with_no_common_seed_is_nan_not_an_error():
    keys = ["precision_at_1", "mean_average_precision_at_r"]
    result = paired_difference(
        [{"seed": 0, **dict.fromkeys(keys, 1.0)}], [{"seed": 1, **dict.fromkeys(keys, 0.0)}], keys
    )
    assert result["n"] == 0 and math.isnan(result["diff"]["precision_at_1"][0])
    assert "| a | b | 0 | n/a | n/a |" in paired_table([("a", "b", result)], "thesis")


def test_metrics_without_seed_are_rejected():
    with pytest.raises(ValueError, match="seed"):
        paired_difference([{"m": 1.0}], [{"seed": 0, "m": 1.0}], ["m"])


def test_paired_table_prints_signed_points_and_wins():
    result = paired_difference(
        [
            {"seed": 0, "precision_at_1": 0.9, "mean_average_precision_at_r": 0.5},
            {"seed": 1, "precision_at_1": 0.8, "mean_average_precision_at_r": 0.6},
        ],
        [
            {"seed": 0, "precision_at_1": 0.85, "mean_average_precision_at_r": 0.55},
            {"seed": 1, "precision_at_1": 0.85, "mean_average_precision_at_r": 0.5},
        ],
        ["precision_at_1", "mean_average_precision_at_r"],
    )
    lines = paired_table([("sft", "base", result)], "thesis").strip().splitlines()
    assert lines[0] == "| run | baseline | n | P@1 | MAP@R |"
    sd = statistics.stdev([5.0, -5.0])
    assert (
        lines[2] == f"| sft | base | 2 | +0.00 ± {sd:.2f} (1/2) | +2.50 ± {statistics.stdev([-5.0, 10.0]):.2f} (1/2) |"
    )


def _renamed_quickstart(tmp_path, name):
    text = open("configs/quickstart.yaml").read().replace("name: quickstart", f"name: {name}", 1)
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return str(path)


def test_protocol_reports_per_seed_differences_of_the_runs(tmp_path):
    base = _renamed_quickstart(tmp_path, "base")
    other = _renamed_quickstart(tmp_path, "other")
    out = tmp_path / "table"
    table = run_protocol(
        "holdout", [base, other], out, seeds=[0, 1], overrides=QUICK + ["train.lr=0.01"], baselines=["base"]
    )
    table = run_protocol(
        "holdout", [base, other], out, seeds=[0, 1], overrides=QUICK + ["train.lr=0.01"], baselines=["base"], reuse=True
    )
    record = json.loads((out / "results.json").read_text())
    assert list(record["paired"]) == ["other"]
    paired = record["paired"]["other"]
    summaries = {
        (n, s): json.loads((out / f"{n}-seed{s}" / "summary.json").read_text())["test"]
        for n in ("base", "other")
        for s in (0, 1)
    }
    deltas = [
        summaries["other", s]["mean_average_precision_at_r"] - summaries["base", s]["mean_average_precision_at_r"]
        for s in (0, 1)
    ]
    assert paired["baseline"] == "base" and paired["n"] == 2
    assert paired["diff"]["mean_average_precision_at_r"][0] == pytest.approx(statistics.mean(deltas))
    assert paired["diff"]["mean_average_precision_at_r"][1] == pytest.approx(statistics.stdev(deltas))
    assert "| other | base | 2 |" in table
    assert [entry["seed"] for entry in record["runs"]["base"]] == [0, 1]


def test_a_bad_baseline_fails_before_anything_trains(tmp_path):
    with pytest.raises(ValueError, match="not among the runs"):
        run_protocol("holdout", ["configs/quickstart.yaml"], tmp_path, seeds=[0], overrides=QUICK, baselines=["nope"])
    assert not (tmp_path / "quickstart-seed0").exists()
