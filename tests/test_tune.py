"""dmlkit tune: spaces as data, the checks before any trial, seeded reproducibility, the config's values as
trial 0, continuing a study, the fair protocol's objective, failed trials and refused study folders."""

import csv
import dataclasses
import json
import math
import statistics
from pathlib import Path

import pytest
import yaml
from scipy.stats import spearmanr

from dmlkit.cli import main
from dmlkit.config import load_config
from dmlkit.tune import SearchSettings, SearchSpace, list_spaces, space_for, tune
from dmlkit.tune.checks import check_space, config_value
from dmlkit.tune.space import overrides_of
from tests_helpers import TINY_OVERRIDES

CONFIG = "configs/quickstart.yaml"
QUICK = [*TINY_OVERRIDES, "eval.clustering=false", "train.max_steps=4", "train.val_every=2", "train.patience=5"]
RANDOM = SearchSettings(sampler="random", seed=3)


def _study_trials(out):
    import optuna

    from dmlkit.tune.storage import open_storage

    study = optuna.load_study(study_name=out.resolve().name, storage=open_storage(out))
    return [{"params": t.params} for t in sorted(study.get_trials(), key=lambda t: t.number)]


def _params(result):
    return [t.params for t in sorted(result.study.trials, key=lambda t: t.number)]


# ---------------------------------------------------------------------------------------------- spaces
@pytest.mark.parametrize(
    "spec, match",
    [
        ({"type": "floaty", "low": 0, "high": 1}, "type must be one of"),
        ({"type": "float", "low": 2, "high": 1}, "above high"),
        ({"type": "float", "low": 0, "high": 1, "log": True}, "log range needs low > 0"),
        ({"type": "int", "low": 0.5, "high": 3}, "integer low and high"),
        ({"type": "categorical", "choices": []}, "non-empty list"),
        ({"type": "float", "low": 0, "high": 1, "lo": 3}, "unknown field"),
        ({"type": "float", "low": 0, "high": math.inf}, "finite numbers"),
    ],
)
def test_bad_ranges_are_refused(spec, match):
    with pytest.raises(ValueError, match=match):
        SearchSpace.from_mapping({"train.lr": spec})


def test_reality_check_ranges_are_shipped():
    assert {
        "contrastive",
        "triplet",
        "multi_similarity",
        "normalized_softmax",
        "fastap",
        "proxy_anchor",
        "ccp",
        "sft",
        "zero_shot",
        "gsp",
    } <= set(list_spaces())
    ms = {p.key: p for p in space_for("multi_similarity").parameters}
    assert (ms["loss.params.alpha"].low, ms["loss.params.alpha"].high, ms["loss.params.alpha"].log) == (
        0.01,
        100.0,
        True,
    )
    assert (ms["loss.params.base"].low, ms["loss.params.base"].high) == (0.0, 1.0)
    bins = space_for("fastap").parameters[0]
    assert (bins.key, bins.kind, bins.low, bins.high) == ("loss.params.num_bins", "int", 2, 250)
    assert {(p.low, p.high) for p in space_for("contrastive").parameters} == {(-0.2, 2.0)}
    temperature = {p.key: p for p in space_for("normalized_softmax").parameters}
    assert temperature["train.loss_lr"].low == 1e-6 and temperature["loss.params.temperature"].log


def test_overrides_load_back_exactly():
    values = {"train.lr": 1.2345678901234567e-05, "model.pooling": "gem", "loss.params.num_bins": 17}
    cfg = check_space(CONFIG, [*overrides_of(values), "loss.name=fastap"], space_for("fastap"))
    assert cfg.train.lr == values["train.lr"] and cfg.model.pooling == "gem" and cfg.loss.params["num_bins"] == 17


# --------------------------------------------------------------------------- checks before any trial
def test_unknown_key_is_refused_with_the_valid_keys():
    space = SearchSpace.from_mapping({"train.lrr": {"type": "float", "low": 1e-5, "high": 1e-3, "log": True}})
    with pytest.raises(ValueError, match=r"train\.lrr.*valid keys are: .*\blr\b"):
        check_space(CONFIG, [], space)


def test_a_loss_parameter_the_loss_does_not_take_is_refused():
    with pytest.raises(ValueError, match=r"loss\.params\.margin.*multi_similarity.*valid parameters are: alpha"):
        check_space(CONFIG, [], space_for("triplet"))


def test_a_range_outside_what_the_component_accepts_is_refused():
    space = SearchSpace.from_mapping({"methods.zero_shot.weight": {"type": "float", "low": 0.0, "high": 1.5}})
    with pytest.raises(ValueError, match=r"zero_shot\.weight.* = 1\.5.*\[0, 1\)"):
        check_space(CONFIG, ["model.pooling=gsp", "methods.zero_shot.weight=0.1"], space)


def test_a_method_key_needs_the_method_on():
    with pytest.raises(ValueError, match="methods.ccp, which this config leaves off"):
        check_space(CONFIG, [], space_for("ccp"))


def test_a_rule_between_two_tuned_keys_is_left_to_the_trials():
    space = SearchSpace.from_mapping(
        {
            "methods.ccp.proxies_per_class": {"type": "int", "low": 1, "high": 6},
            "methods.ccp.pool_size": {"type": "int", "low": 1, "high": 6},
        }
    )
    check_space(
        CONFIG, ["methods.ccp.enabled=true", "methods.ccp.proxies_per_class=1", "methods.ccp.pool_size=2"], space
    )
    alone = SearchSpace.from_mapping({"methods.ccp.pool_size": {"type": "int", "low": 1, "high": 6}})
    with pytest.raises(ValueError, match="pool_size"):  # with the proxies fixed at 2, a pool of 1 is always refused
        check_space(
            CONFIG, ["methods.ccp.enabled=true", "methods.ccp.proxies_per_class=2", "methods.ccp.pool_size=2"], alone
        )


def test_each_worker_and_each_continuation_draws_its_own_stream():
    from dmlkit.tune.study_setup import worker_seed

    assert worker_seed(0, 1) == worker_seed(0, 1)  # a fresh study run by one worker reproduces
    seeds = {
        worker_seed(0, 1, 0),
        worker_seed(0, 1, 1),
        worker_seed(0, 3, 0),
        worker_seed(1, 1, 0),
        worker_seed(0, 1, 0, "host-a"),
        worker_seed(0, 1, 0, "host-b"),
    }
    assert len(seeds) == 6


def test_two_workers_joining_a_study_with_the_same_trial_count_draw_different_streams():
    """Two commands started at different times can find the same number of trials (an interrupted trial enqueues
    its retry): their random streams must differ, or they propose the same points; a fresh study reproduces."""
    import optuna
    from optuna.trial import TrialState

    from dmlkit.tune.study_setup import joining_nonce, worker_seed

    fresh = [optuna.trial.create_trial(state=TrialState.WAITING)]
    assert joining_nonce(fresh, "1-aa") == joining_nonce(fresh, "2-bb") == ""
    started = [optuna.trial.create_trial(value=0.5), optuna.trial.create_trial(state=TrialState.FAIL)] + fresh
    first, second = (worker_seed(0, len(started), 0, "", joining_nonce(started, wid)) for wid in ("1-aa", "2-bb"))
    assert first != second
    draws = [optuna.samplers.RandomSampler(seed=s)._rng.rng.uniform(size=3).tolist() for s in (first, second)]
    assert draws[0] != draws[1]


def test_two_commands_started_together_on_a_fresh_study_draw_different_streams(tmp_path):
    """Two commands started at the same moment on a fresh study both find no trial and both run a worker 0: the
    second one's lock must see the first's, and its stream differ; one command alone keeps the fresh study's."""
    import optuna
    from optuna.trial import TrialState

    from dmlkit.tune.liveness import WorkerLock
    from dmlkit.tune.study_setup import worker_seed
    from dmlkit.tune.workers import stream_nonce

    fresh = [optuna.trial.create_trial(state=TrialState.WAITING)]
    with WorkerLock(tmp_path, 0) as alone:
        assert stream_nonce(fresh, alone) == ""
        with WorkerLock(tmp_path, 1) as other_index:  # the same command's second worker: its index sets it apart
            assert stream_nonce(fresh, other_index) == ""
            with WorkerLock(tmp_path, 0) as twin:
                assert stream_nonce(fresh, twin) == twin.id
                assert stream_nonce(fresh, alone) == alone.id  # of two looking at once, either may be the later
                seeds = {worker_seed(0, 1, 0, "", stream_nonce(fresh, lock)) for lock in (alone, twin)}
                assert len(seeds) == 2
        assert stream_nonce(fresh, alone) == ""  # the twin's lock went with it


def test_config_value_reads_defaults_of_components():
    cfg = check_space(CONFIG, [], space_for("multi_similarity"))
    assert config_value(cfg, "loss.params.alpha") == 2.0  # the registry's default: quickstart sets no alpha
    assert config_value(cfg, "loss.miner_params.epsilon") == 0.1
    assert config_value(cfg, "train.lr") == cfg.train.lr


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--trials", "0"], "--trials must be a positive integer"),
        (["--trials", "-2"], "--trials must be a positive integer"),
        (["--jobs", "0"], "--jobs must be a positive integer"),
        (["--space", "no_such_space"], "unknown search space 'no_such_space'"),
        (["--storage", "redis://localhost"], "must be a database URL"),
        (["--storage", "postgresql://nobody@127.0.0.1:1/none", "--trials", "1"], "cannot open the study storage"),
        (["--set", "data.val_fraction=0"], "validates on its test classes"),
    ],
)
def test_bad_command_lines_are_refused_before_training(argv, match, tmp_path, capsys):
    assert main(["tune", CONFIG, "--out", str(tmp_path / "study"), *argv]) == 2
    assert match in capsys.readouterr().err
    assert not (tmp_path / "study" / "trials").exists()


# ---------------------------------------------------------------------------- studies that train
def test_seeded_study_reproduces_its_trials_and_starts_from_the_config(tmp_path):
    settings = SearchSettings(seed=7, startup_trials=2)
    first = tune(CONFIG, trials=3, out=tmp_path / "a", overrides=QUICK, settings=settings)
    again = tune(CONFIG, trials=3, out=tmp_path / "b", overrides=QUICK, settings=settings)
    other = tune(
        CONFIG, trials=3, out=tmp_path / "c", overrides=QUICK, settings=SearchSettings(seed=8, startup_trials=2)
    )
    assert _params(first) == _params(again)
    assert [t.value for t in first.study.trials] == [t.value for t in again.study.trials]
    assert _params(first)[1:] != _params(other)[1:]
    assert _params(first)[0] == {
        "loss.params.alpha": 2.0,
        "loss.params.beta": 40.0,
        "loss.params.base": 0.5,
        "loss.miner_params.epsilon": 0.1,
    }
    assert _params(first)[0] == _params(other)[0]
    # every trial is an ordinary run folder that never saw the test classes, and best.yaml trains the best values
    best = first.best
    run = tmp_path / "a" / "trials" / f"{best['trial']:04d}"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["test"] == {} and summary["best_val"]["value"] == pytest.approx(best["value"])
    tuned = yaml.safe_load((tmp_path / "a" / "best.yaml").read_text())
    for key, value in best["params"].items():
        section, *rest = key.split(".")
        node = tuned[section]
        for part in rest:
            node = node[part]
        assert node == value
    assert tuned["eval"]["test"] is True and tuned["plots"] is True
    # best_values.yaml, put last in a base: list, turns the searched config into best.yaml
    layered = tmp_path / "layered.yaml"
    layered.write_text(
        yaml.safe_dump({"base": [str(Path(CONFIG).resolve()), str(tmp_path / "a" / "best_values.yaml")]})
    )
    best_config = load_config(tmp_path / "a" / "best.yaml")
    assert load_config(layered, QUICK) == dataclasses.replace(best_config, name=load_config(CONFIG).name)
    assert load_config(layered, QUICK) != load_config(CONFIG, QUICK)
    rows = (tmp_path / "a" / "trials.md").read_text().splitlines()
    assert len(rows) == 2 + 3 and "complete" in rows[2]
    assert (tmp_path / "a" / "best_so_far.png").stat().st_size > 0


def test_running_again_continues_the_study(tmp_path, capsys):
    out = tmp_path / "study"
    args = [
        "tune",
        CONFIG,
        "--out",
        str(out),
        "--sampler",
        "random",
        "--quiet",
        *sum((["--set", o] for o in QUICK), []),
    ]
    assert main([*args, "--trials", "2"]) == 0
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("trials/*/summary.json")}
    assert len(stamps) == 2
    assert main([*args, "--trials", "3"]) == 0
    assert {p: p.stat().st_mtime_ns for p in out.glob("trials/*/summary.json") if p in stamps} == stamps
    assert len(list(out.glob("trials/*/summary.json"))) == 3
    assert "best: trial" in capsys.readouterr().out
    params = [tuple(t["params"].items()) for t in _study_trials(out)]
    assert len(set(params)) == 3  # the continued study draws from a stream of its own, not trial 1's again
    assert main([*args, "--trials", "3"]) == 0  # nothing left to do: no fourth trial
    assert len(list(out.glob("trials/*"))) == 3
    (out / "trials.md").unlink()
    capsys.readouterr()
    assert main(["tune", "--status", str(out)]) == 0  # the results as they stand, no trial run
    assert (out / "trials.md").read_text() in capsys.readouterr().out and len(list(out.glob("trials/*"))) == 3
    assert main(["tune", "--status", str(tmp_path)]) == 2
    assert "is not a study folder" in capsys.readouterr().err
    # dmlkit report shows the study: its best trial and every trial's value in %
    best = json.loads((out / "best.json").read_text())
    trials = list(csv.DictReader((out / "trials.csv").open()))
    for key, rho in best["rank_correlations"].items():  # each searched key's Spearman rho over the three trials
        assert rho == pytest.approx(spearmanr([float(t[key]) for t in trials], [float(t["value"]) for t in trials])[0])
    assert best["rank_correlations"] and set(best["rank_correlations"]) <= set(trials[0])
    page = tmp_path / "report.html"
    assert main(["report", str(out), "--out", str(page)]) == 0
    text = page.read_text()
    assert f"Best: trial {best['trial']}, {100 * best['value']:.2f}" in text
    values = [line.split(",")[3] for line in (out / "trials.csv").read_text().splitlines()[1:]]
    assert all(f"<td>{100 * float(v):.2f}</td>" in text for v in values) and text.count("data:image/png") >= 1
    for key, rho in best["rank_correlations"].items():  # the space table shows how each key bore on the score
        assert f"<td>{key}</td>" in text and (rho is None or f"<td>{rho:+.2f}</td>" in text)


def test_a_folder_of_another_search_is_refused(tmp_path, capsys):
    out = tmp_path / "study"
    tune(CONFIG, trials=1, out=out, overrides=QUICK, settings=RANDOM)
    before = sorted(p.name for p in out.rglob("*"))
    with pytest.raises(ValueError, match="holds a study of another search.*config"):
        tune(CONFIG, trials=1, out=out, overrides=[*QUICK, "train.lr=0.5"], settings=RANDOM)
    with pytest.raises(ValueError, match="holds a study of another search.*space"):
        tune(
            CONFIG,
            space=space_for("multi_similarity").parameters[:1]
            and SearchSpace(space_for("multi_similarity").parameters[:1]),
            trials=1,
            out=out,
            overrides=QUICK,
        )
    assert sorted(p.name for p in out.rglob("*")) == before


def test_fair_objective_is_the_mean_of_its_folds(tmp_path):
    space = SearchSpace.from_mapping({"loss.params.base": {"type": "float", "low": 0.3, "high": 0.7}})
    result = tune(
        CONFIG, space=space, trials=2, out=tmp_path, overrides=QUICK, protocol="fair", folds=3, settings=RANDOM
    )
    for trial in result.study.trials:
        folds = [
            json.loads((tmp_path / "trials" / f"{trial.number:04d}" / f"fold{k}" / "summary.json").read_text())
            for k in range(3)
        ]
        values = [f["best_val"]["value"] for f in folds]
        assert trial.value == pytest.approx(statistics.fmean(values), abs=1e-12)
        assert trial.user_attrs["sem"] == pytest.approx(statistics.stdev(values) / math.sqrt(3), abs=1e-12)
        assert len(set(values)) > 1  # three different validation folds
        configs = [
            yaml.safe_load((tmp_path / "trials" / f"{trial.number:04d}" / f"fold{k}" / "config.yaml").read_text())
            for k in range(3)
        ]
        assert [c["data"]["fold"] for c in configs] == [0, 1, 2] and {c["data"]["folds"] for c in configs} == {3}


def test_failed_trials_are_recorded_and_never_best(tmp_path):
    space = SearchSpace.from_mapping(
        {
            "methods.ccp.proxies_per_class": {"type": "int", "low": 1, "high": 3},
            "methods.ccp.pool_size": {"type": "int", "low": 1, "high": 3},
        }
    )
    overrides = [
        *QUICK,
        "methods.ccp.enabled=true",
        "methods.ccp.proxies_per_class=1",
        "methods.ccp.pool_size=1",
        "methods.ccp.patience=1",
    ]
    result = tune(
        CONFIG,
        space=space,
        trials=4,
        out=tmp_path,
        overrides=overrides,
        settings=SearchSettings(sampler="random", seed=2),
    )
    failed = [t for t in result.study.trials if t.state.name == "FAIL"]
    assert len(failed) == 2, "seed 2 draws a pool smaller than the proxies in trials 1 and 3"
    for trial in failed:
        assert trial.params["methods.ccp.pool_size"] < trial.params["methods.ccp.proxies_per_class"]
        assert "pool_size" in trial.user_attrs["fail_reason"]
    assert result.best["params"]["methods.ccp.pool_size"] >= result.best["params"]["methods.ccp.proxies_per_class"]
    assert len([t for t in result.study.trials if t.state.name in ("COMPLETE", "FAIL")]) == 4
    assert "pool_size" in (tmp_path / "trials.md").read_text()


def test_a_diverging_trial_fails_with_its_reason(tmp_path):
    space = SearchSpace.from_mapping({"train.lr": {"type": "categorical", "choices": [1.0e-3, 1.0e30]}})
    result = tune(
        CONFIG,
        space=space,
        trials=3,
        out=tmp_path,
        overrides=[*QUICK, "train.optimizer=sgd", "train.lr=1.0e+30"],
        settings=SearchSettings(sampler="random", seed=0),
    )
    states = {t.params["train.lr"]: t for t in result.study.trials}
    assert (
        states[1.0e30].state.name == "FAIL"
        and "non-finite" in states[1.0e30].user_attrs["fail_reason"].lower()
        or "became" in states[1.0e30].user_attrs["fail_reason"]
    )
    assert result.best["params"]["train.lr"] == 1.0e-3


def test_then_test_tests_the_fold_models_and_retrains_best_on_seeds(tmp_path, capsys):
    from dmlkit.evaluation.evaluate_embeddings import evaluate_embeddings
    from dmlkit.assemble import embed_run
    from dmlkit.tune.test_step import interval95

    space = SearchSpace.from_mapping({"loss.params.base": {"type": "float", "low": 0.3, "high": 0.7}})
    sets = sum((["--set", o] for o in QUICK), [])
    space_file = tmp_path / "space.yaml"
    space_file.write_text(yaml.safe_dump(space.to_mapping()))
    out = tmp_path / "study"
    assert (
        main(
            [
                "tune",
                CONFIG,
                "--out",
                str(out),
                "--trials",
                "1",
                "--space",
                str(space_file),
                "--protocol",
                "fair",
                "--folds",
                "2",
                "--quiet",
                "--then-test",
                "0",
                "1",
                *sets,
            ]
        )
        == 0
    )
    text = (out / "test.md").read_text()
    assert text in capsys.readouterr().out
    folds = [out / "trials" / "0000" / f"fold{k}" for k in range(2)]
    separate = [evaluate_embeddings(*embed_run(f, "test"), ks=(1, 2, 4, 8), clustering=False, seed=0) for f in folds]
    row = next(line for line in text.splitlines() if "separated" in line).strip(" |").split(" | ")
    assert float(row[2]) == pytest.approx(
        100 * statistics.fmean(m["mean_average_precision_at_r"] for m in separate), abs=0.006
    )
    retrained = [json.loads((out / "test" / f"quickstart-tuned-seed{s}" / "summary.json").read_text()) for s in (0, 1)]
    values = [100 * r["test"]["mean_average_precision_at_r"] for r in retrained]
    mean, half = interval95(values)
    assert half == pytest.approx(12.706 * statistics.stdev(values) / math.sqrt(2))
    assert f"[{mean - half:.2f}, {mean + half:.2f}]" in text.splitlines()[-1]


def test_a_study_written_before_a_config_key_was_added_continues(tmp_path):
    """A key added to dmlkit since a study began (at its default) is no difference: the study folder and the
    study in its storage are accepted; a changed value still is one."""
    import optuna

    from dmlkit.config import dump_config, load_config
    from dmlkit.tune.study_setup import SIGNATURE_ATTR, check_folder, define_study, open_study
    from dmlkit.tune.trial_runs import TrialPlan

    plan = TrialPlan(CONFIG, tuple(QUICK))
    space = space_for("multi_similarity")
    current = define_study(plan, dump_config(load_config(CONFIG, QUICK)), space, "mean_average_precision_at_r")
    older = yaml.safe_load(current.config_text)
    del older["eval"]["test"]  # as a study record of a dmlkit without the key
    record = {**current.record("s", None), "config": older, "signature": "0123456789abcdef"}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(record))
    check_folder(tmp_path, current, "s", None)
    changed = define_study(plan, dump_config(load_config(CONFIG, [*QUICK, "train.lr=0.5"])), space, record["metric"])
    with pytest.raises(ValueError, match="its config differ"):
        check_folder(tmp_path, changed, "s", None)
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name="s", direction="maximize")
    study.set_user_attr(SIGNATURE_ATTR, "0123456789abcdef")
    study.set_user_attr(
        "definition",
        json.dumps(
            {
                "config_text": yaml.safe_dump(older),
                "space": current.space,
                "protocol": "holdout",
                "folds": 4,
                "metric": record["metric"],
            }
        ),
    )
    open_study(storage, "s", current)
    with pytest.raises(ValueError, match="of another search"):
        open_study(storage, "s", changed)
