"""Hyperparameter search on Optuna: ``dmlkit tune CONFIG`` and ``dmlkit.tune.tune(config, space, ...)``.

- ``space``: a search space as data (config keys and ranges); ``catalog``: the spaces shipped beside the
  components they tune (``losses/``, ``methods/``, ``pooling/`` ``search_spaces.yaml``) and a user's file;
- ``checks``: the space checked against the config before any trial;
- ``trial_runs``: one trial, as ordinary run folders (holdout or the fair protocol's folds), and pruning;
- ``study_setup``: what defines a study (its folder, signature, sampler, pruner); ``storage``: journal file
  or PostgreSQL; ``liveness``: dead local workers found by their locks;
- ``workers``: the loop every worker runs, with a global trial cap; ``results``: trials table, ``best.yaml``,
  figures; ``tuning``: ``tune()``, the whole flow.
"""

from dmlkit.tune.catalog import list_spaces, register_space, space_for
from dmlkit.tune.space import Parameter, SearchSpace
from dmlkit.tune.study_setup import SearchSettings
from dmlkit.tune.tuning import StudyResult, tune

__all__ = [
    "Parameter",
    "SearchSettings",
    "SearchSpace",
    "StudyResult",
    "list_spaces",
    "register_space",
    "space_for",
    "tune",
]
