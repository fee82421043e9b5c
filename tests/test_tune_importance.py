"""The study summaries of tune.importance: Spearman against SciPy, fANOVA importances on studies whose
objective depends on one key only, and both reproducible from the trials alone."""

import random

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial
from scipy.stats import spearmanr

from dmlkit.tune.importance import FOREST_SEED, key_importances, rank_correlations, spearman

optuna.logging.set_verbosity(optuna.logging.WARNING)

DISTRIBUTIONS = {
    "lr": FloatDistribution(1e-4, 1e-1, log=True),
    "margin": FloatDistribution(0.0, 1.0),
    "proxies": IntDistribution(1, 8),
    "target": CategoricalDistribution(["centre", "sample"]),
}


def _study(objective, trials=24, seed=0, keys=("lr", "margin", "proxies", "target"), failed=0):
    """A study of ``trials`` finished trials drawn uniformly at random, scored by ``objective(params)``."""
    rng = random.Random(seed)
    study = optuna.create_study(direction="maximize")
    for _ in range(trials):
        params = {
            "lr": 10 ** rng.uniform(-4, -1),
            "margin": rng.uniform(0, 1),
            "proxies": rng.randint(1, 8),
            "target": rng.choice(["centre", "sample"]),
        }
        params = {k: v for k, v in params.items() if k in keys}
        distributions = {k: DISTRIBUTIONS[k] for k in keys}
        study.add_trial(create_trial(params=params, distributions=distributions, value=objective(params)))
    for _ in range(failed):
        study.add_trial(create_trial(params=params, distributions=distributions, state=TrialState.FAIL))
    return study


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_spearman_matches_scipy_with_ties(seed):
    rng = random.Random(seed)
    x = [float(rng.randint(0, 5)) for _ in range(15)]  # many ties
    y = [rng.gauss(0, 1) + 0.3 * v for v in x]
    assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)
    assert spearman(y, x) == pytest.approx(spearmanr(y, x).statistic, abs=1e-12)


def test_spearman_of_monotone_samples_is_one_and_undefined_cases_are_none():
    x = [0.1, 0.5, 0.2, 0.9, 0.3]
    assert spearman(x, [v**3 for v in x]) == pytest.approx(1.0)
    assert spearman(x, [-v for v in x]) == pytest.approx(-1.0)
    assert spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None
    assert spearman([1.0, 2.0], [1.0, 2.0]) is None
    with pytest.raises(ValueError, match="one length"):
        spearman([1.0, 2.0, 3.0], [1.0, 2.0])


def test_rank_correlations_give_each_numeric_key_its_direction_and_skip_categorical_keys():
    study = _study(lambda p: -p["margin"] + 0.001 * p["proxies"], failed=2)
    rho = rank_correlations(study.trials, ["lr", "margin", "proxies", "target"])
    assert set(rho) == {"lr", "margin", "proxies"}
    finished = [t for t in study.trials if t.state == TrialState.COMPLETE]
    values = [t.value for t in finished]
    for key in rho:
        assert rho[key] == pytest.approx(spearmanr([t.params[key] for t in finished], values).statistic)
    assert rho["margin"] < -0.99


def test_rank_correlation_is_defined_for_a_single_key_where_importances_are_not():
    study = _study(lambda p: p["lr"] ** 0.5, keys=("lr",))
    assert rank_correlations(study.trials, ["lr"]) == {"lr": pytest.approx(1.0)}
    assert key_importances(study) == {}


def test_importances_put_the_weight_on_the_key_the_objective_depends_on():
    study = _study(lambda p: (p["margin"] - 0.3) ** 2, trials=40)
    importances = key_importances(study)
    assert set(importances) == {"lr", "margin", "proxies", "target"}
    assert sum(importances.values()) == pytest.approx(1.0)
    assert importances["margin"] > 0.8


def test_importances_are_a_function_of_the_trials_alone():
    def build():
        return _study(lambda p: p["margin"] + 0.5 * p["proxies"] / 8 + (p["target"] == "centre") * 0.2, trials=30)

    first = key_importances(build())
    assert key_importances(build()) == first  # the forest's seed is fixed: the same trials, the same importances
    fanova = optuna.importance.FanovaImportanceEvaluator(seed=FOREST_SEED)  # not Optuna's default (PED-ANOVA)
    assert first == pytest.approx(optuna.importance.get_param_importances(build(), evaluator=fanova))


def test_importances_are_empty_when_the_objective_is_flat_or_too_few_trials_finished():
    assert key_importances(_study(lambda p: 0.5)) == {}
    assert key_importances(_study(lambda p: p["margin"], trials=2)) == {}
