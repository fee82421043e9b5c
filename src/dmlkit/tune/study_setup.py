"""What defines a study, kept in its folder (``study.yaml``) and in its storage, so that a study is continued only
by the same search: the resolved config, the space, the protocol and the validation metric.

Running the same command again continues the study: finished trials are kept, the trial cap may grow. A
command with another config, space or protocol pointed at the folder (or at the same study in a shared
database) is refused with how to start a new study instead. The sampler and the pruner are how the search
goes on, not what it searches, so they may change between runs of the command.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dmlkit.tune.space import SearchSpace
from dmlkit.tune.trial_runs import TrialPlan

__all__ = [
    "PRUNERS",
    "SAMPLERS",
    "SearchSettings",
    "StudyDefinition",
    "joining_nonce",
    "make_pruner",
    "make_sampler",
    "open_study",
    "worker_seed",
]

SAMPLERS = ("tpe", "gp", "random")
PRUNERS = ("none", "median", "halving", "hyperband")
STUDY_FILE = "study.yaml"
SIGNATURE_ATTR = "dmlkit_signature"


@dataclass(frozen=True)
class SearchSettings:
    """How the search proposes and stops trials."""

    sampler: str = "tpe"
    seed: int = 0
    startup_trials: int = 10
    pruner: str = "none"
    heartbeat: int = 30  # seconds between a PostgreSQL worker's heartbeats; stale after 4 missed

    @property
    def grace(self) -> int:
        return 4 * self.heartbeat

    def __post_init__(self) -> None:
        if self.sampler not in SAMPLERS:
            raise ValueError(f"--sampler must be one of {', '.join(SAMPLERS)}, got {self.sampler!r}")
        if self.pruner not in PRUNERS:
            raise ValueError(f"--pruner must be one of {', '.join(PRUNERS)}, got {self.pruner!r}")
        if isinstance(self.startup_trials, bool) or not isinstance(self.startup_trials, int) or self.startup_trials < 0:
            raise ValueError(f"--startup-trials must be an integer >= 0, got {self.startup_trials!r}")
        if isinstance(self.heartbeat, bool) or not isinstance(self.heartbeat, int) or self.heartbeat < 1:
            raise ValueError(f"--heartbeat must be a whole number of seconds >= 1, got {self.heartbeat!r}")


@dataclass(frozen=True)
class StudyDefinition:
    """What a study searches: the config (resolved), the space, the protocol and the metric maximised."""

    config_text: str
    space: dict[str, Any]
    protocol: str
    folds: int
    metric: str
    plan: TrialPlan = field(compare=False)

    def plan_config(self) -> Any:
        """The resolved config as an ``ExperimentConfig``."""
        return _stored_config(yaml.safe_load(self.config_text) or {})

    def signature(self) -> str:
        text = json.dumps(
            {
                "config": self.config_text,
                "space": self.space,
                "protocol": self.protocol,
                "folds": self.folds if self.protocol == "fair" else None,
                "metric": self.metric,
            },
            sort_keys=True,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def record(self, study_name: str, storage: str | None) -> dict[str, Any]:
        return {
            "study_name": study_name,
            "signature": self.signature(),
            "storage": storage or "journal.log",
            "config_path": self.plan.config_path,
            "overrides": list(self.plan.overrides),
            "protocol": self.protocol,
            "folds": self.folds,
            "metric": self.metric,
            "space": self.space,
            "config": yaml.safe_load(self.config_text),
        }


def define_study(plan: TrialPlan, config_text: str, space: SearchSpace, metric: str) -> StudyDefinition:
    return StudyDefinition(config_text, space.to_mapping(), plan.protocol, plan.folds, metric, plan)


def _stored_config(values: dict[str, Any]) -> Any:
    """A study record's config, read as a stored record (keys added to dmlkit since take their defaults)."""
    import tempfile

    from dmlkit.config import load_config

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        fh.write(yaml.safe_dump(values, sort_keys=False))
    try:
        return load_config(fh.name, stored=True)
    finally:
        Path(fh.name).unlink(missing_ok=True)


def _differences(old: dict[str, Any], new: StudyDefinition) -> list[str]:
    """What differs between a stored study's search and ``new``: its config (compared as ``config_differences``
    does, so a config key added to dmlkit since, at its default, is no difference), space, protocol, folds or
    metric."""
    from dmlkit.config import config_differences

    differing = [
        key
        for key, value in (("space", new.space), ("protocol", new.protocol), ("metric", new.metric))
        if old.get(key) != value
    ]
    if new.protocol == "fair" and old.get("folds") != new.folds:
        differing.append("folds")
    try:
        changed = config_differences(_stored_config(old.get("config") or {}), new.plan_config())
    except ValueError:  # a record no longer readable as a config
        changed = ["config"]
    return (["config"] if changed else []) + differing


def is_study_folder(path: str | Path) -> bool:
    return (Path(path) / STUDY_FILE).is_file()


def read_record(study_dir: str | Path) -> dict[str, Any]:
    """A study folder's ``study.yaml``; a folder without one is an error that says so."""
    if not is_study_folder(study_dir):
        raise ValueError(f"'{study_dir}' is not a study folder of dmlkit tune (it has no {STUDY_FILE})")
    return yaml.safe_load((Path(study_dir) / STUDY_FILE).read_text()) or {}


def check_folder(study_dir: Path, definition: StudyDefinition, study_name: str, storage: str | None) -> None:
    """Refuse a folder holding another study; write ``study.yaml`` for a new one."""
    path = study_dir / STUDY_FILE
    record = definition.record(study_name, storage)
    if path.is_file():
        old = yaml.safe_load(path.read_text()) or {}
        differing = [] if old.get("signature") == record["signature"] else _differences(old, definition)
        if differing:
            raise ValueError(
                f"'{study_dir}' holds a study of another search (its {', '.join(differing)} differ); continue it with "
                f"its own config and space (recorded in {path}), or give a new --out folder for a new study"
            )
        return
    if (study_dir / "trials").is_dir() and any((study_dir / "trials").iterdir()):
        raise ValueError(
            f"'{study_dir}' holds trial runs but no {STUDY_FILE}; it is not a study folder of dmlkit tune; "
            "choose another --out folder"
        )
    study_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(record, sort_keys=False))


def worker_seed(seed: int, trials_at_start: int, worker: int = 0, host: str = "", nonce: str = "") -> int:
    """The sampler seed of one worker: the study's seed mixed with how many trials the study held when the worker
    started, the worker's index, (for a database shared by machines) its host and ``nonce``, the worker's own id
    where it joins a study that has run trials or that another command's worker of its index runs
    (``workers.stream_nonce``). A fresh study run by one worker thus proposes
    the same trials every time, while parallel workers, and workers continuing a study, draw their random trials
    from streams of their own instead of proposing the same points again."""
    text = f"{seed}:{trials_at_start}:{worker}:{host}" + (f":{nonce}" if nonce else "")
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def joining_nonce(trials: list[Any], worker_id: str) -> str:
    """``worker_id`` for a worker that joins a study some trial of which has started, "" for a fresh study (every
    trial still waiting). Two commands started at different times can find the same number of trials (an
    interrupted trial enqueues its retry), so the count alone would give them the same random stream."""
    from optuna.trial import TrialState

    return "" if all(t.state == TrialState.WAITING for t in trials) else worker_id


def make_sampler(settings: SearchSettings, seed: int | None = None) -> Any:
    """Seeded multivariate TPE (the default), Optuna's GP sampler (the analogue of Reality Check's Ax GP-EI),
    or random search; ``constant_liar`` keeps parallel workers from proposing the same point while their trials
    run. ``seed``: this worker's (``worker_seed``); default the study's."""
    import optuna

    seed = settings.seed if seed is None else seed
    if settings.sampler == "tpe":
        return optuna.samplers.TPESampler(
            seed=seed, multivariate=True, constant_liar=True, n_startup_trials=settings.startup_trials
        )
    if settings.sampler == "gp":
        try:
            return optuna.samplers.GPSampler(seed=seed, n_startup_trials=settings.startup_trials)
        except ImportError as err:
            raise ValueError(f"--sampler gp needs scipy ({err}); pip install scipy, or use --sampler tpe") from err
    return optuna.samplers.RandomSampler(seed=seed)


def make_pruner(settings: SearchSettings, val_every: int, budget: int) -> Any:
    """The pruner on the validation curve (``budget``: the steps of all of a trial's runs)."""
    import optuna

    if settings.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=val_every)
    if settings.pruner == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=val_every, reduction_factor=3)
    if settings.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=val_every, max_resource=budget, reduction_factor=3)
    return optuna.pruners.NopPruner()


def open_study(storage: Any, study_name: str, definition: StudyDefinition) -> Any:
    """Create the study, or load it, refusing one of another search under the same name. The returned object
    records (the start trial, the results); the workers load the study with their own sampler and pruner."""
    import optuna

    study = optuna.create_study(storage=storage, study_name=study_name, direction="maximize", load_if_exists=True)
    stored = study.user_attrs.get(SIGNATURE_ATTR)
    if stored is not None and stored != definition.signature():
        recorded = json.loads(study.user_attrs.get("definition", "{}"))
        old = {**recorded, "config": yaml.safe_load(recorded.get("config_text", "")) or {}}
        if not _differences(old, definition):
            stored = definition.signature()  # the same search, written by an older dmlkit
    if stored is None:
        study.set_user_attr(SIGNATURE_ATTR, definition.signature())
        study.set_user_attr(
            "definition", json.dumps(asdict(definition) | {"plan": asdict(definition.plan)}, default=str)
        )
    elif stored != definition.signature():
        raise ValueError(
            f"the storage already holds a study named '{study_name}' of another search (config, space or protocol "
            "differ); give another --study-name, or the same config, space and protocol to continue it"
        )
    return study
