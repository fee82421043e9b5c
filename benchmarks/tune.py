"""Benchmark: a study's own cost per trial (sampler + storage) against the training of a trial.

For each storage (the study folder's journal file; PostgreSQL with ``--postgres URL``, or ``--postgres auto`` for a
throwaway server started from this checkout's ``tests/postgres_server.py``) and each study size (``--finished``
trials already done, multi-similarity's 4-key space), one, then ``--jobs`` processes at once, each run ``--repeats``
trial cycles without training: what a dmlkit worker does around a trial (the study's trials read and counted
against the cap, ``ask`` with the seeded multivariate TPE sampler, the space's values drawn, the trial stamped
with its worker and run folder, and ``tell`` with its results). The table gives the median seconds of a cycle
and its share of a trial's training: the reference is a real trial trained in this process, the smallest one
dmlkit's tests train (the quickstart config cut to 24 classes, 8 steps) and, for scale, ``--trial-seconds``
(default 600: a trial of the font testbed on this machine kind's 2 cores).

Run: ``python -m benchmarks.tune --finished 10 200 --jobs 2 --repeats 10 --postgres auto``.
"""

from __future__ import annotations

import multiprocessing
import statistics
import tempfile
import time
import warnings
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks import _harness as h

__all__ = ["main", "run", "format_table"]

SPACE = "multi_similarity"


def _fill(study: Any, finished: int, seed: int = 0) -> None:
    """``finished`` completed trials of the space, added directly (no training)."""
    import optuna

    from dmlkit.tune import space_for

    space = space_for(SPACE)
    sampler = optuna.samplers.RandomSampler(seed=seed)
    trials = []
    for number in range(finished):
        params = {p.key: sampler.sample_independent(study, None, p.key, p.distribution()) for p in space.parameters}
        trials.append(
            optuna.trial.create_trial(
                params=params,
                distributions=space.distributions(),
                value=0.3 + 0.001 * (number % 97),
                user_attrs={"worker": "bench"},
            )
        )
    study.add_trials(trials)


def _cycles(storage_spec: str, study_name: str, repeats: int) -> list[float]:
    """``repeats`` trial cycles of a worker, each timed (runs in a worker process for the parallel rows)."""
    import optuna

    from dmlkit.tune import SearchSettings, space_for
    from dmlkit.tune.storage import open_storage
    from dmlkit.tune.study_setup import make_sampler
    from dmlkit.tune.workers import counted_trials

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)  # the cycle is what optimize() runs too
    folder, _, url = storage_spec.partition("|")
    study = optuna.load_study(
        study_name=study_name,
        storage=open_storage(Path(folder), url or None),
        sampler=make_sampler(SearchSettings(seed=1)),
    )
    space, times = space_for(SPACE), []
    for _ in range(repeats):
        started = time.perf_counter()
        counted_trials(study.get_trials(deepcopy=False))
        trial = study.ask()
        space.suggest(trial)
        for key, value in (
            ("worker", "bench"),
            ("run_dir", "trials/x"),
            ("sem", None),
            ("steps", [1200]),
            ("best_steps", [800]),
            ("train_seconds", 600.0),
        ):
            trial.set_user_attr(key, value)
        study.tell(trial, 0.4)
        times.append(time.perf_counter() - started)
    return times


def _cycles_entry(args: tuple[str, str, int]) -> list[float]:
    return _cycles(*args)


def _trial_seconds() -> float:
    """A real trial of the smallest size dmlkit's tests train, timed in this process."""
    from dmlkit.tune import SearchSettings, SearchSpace, tune

    space = SearchSpace.from_mapping({"loss.params.base": {"type": "float", "low": 0.3, "high": 0.7}})
    small = [
        "data.max_classes=24",
        "data.val_fraction=0.25",
        "model.embedding_dim=16",
        "train.batch_size=16",
        "train.m_per_class=4",
        "train.max_steps=8",
        "train.val_every=4",
        "eval.clustering=false",
    ]
    with tempfile.TemporaryDirectory() as out:
        tune(
            "configs/quickstart.yaml", space=space, trials=1, out=out, overrides=small, settings=SearchSettings()
        )  # warm-up
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        tune("configs/quickstart.yaml", space=space, trials=1, out=out, overrides=small, settings=SearchSettings())
        return time.perf_counter() - started


def _storages(postgres: str | None, stack: ExitStack) -> list[tuple[str, str | None]]:
    storages: list[tuple[str, str | None]] = [("journal file", None)]
    if postgres == "auto":
        import sys

        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from postgres_server import postgres_server

        postgres = stack.enter_context(postgres_server(database="bench")).url
    if postgres:
        storages.append(("PostgreSQL", postgres))
    return storages


def _row(storage: str, url: str | None, finished: int, jobs: int, repeats: int, folder: Path) -> dict[str, Any]:
    import optuna

    from dmlkit.tune.storage import open_storage

    name = f"bench-{finished}-{jobs}-{time.time_ns()}"
    study_dir = folder / name
    study = optuna.create_study(study_name=name, storage=open_storage(study_dir, url), direction="maximize")
    _fill(study, finished)
    spec = (f"{study_dir}|{url or ''}", name, repeats)
    if jobs == 1:
        times = _cycles(*spec)
    else:
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            times = [t for part in pool.map(_cycles_entry, [spec] * jobs) for t in part]
    return {"storage": storage, "finished": finished, "jobs": jobs, "cycle_s": statistics.median(times)}


def run(finished: list[int], jobs: int, repeats: int, postgres: str | None, trial_seconds: float) -> dict[str, Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    smallest = _trial_seconds()
    rows = []
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        for storage, url in _storages(postgres, stack):
            for count in finished:
                for k in sorted({1, jobs}):
                    rows.append(_row(storage, url, count, k, repeats, folder))
    for row in rows:
        row["share_smallest"] = row["cycle_s"] / smallest
        row["share_reference"] = row["cycle_s"] / trial_seconds
    return {"repeats": repeats, "smallest_trial_s": smallest, "reference_trial_s": trial_seconds, "rows": rows}


def format_table(result: dict[str, Any]) -> str:
    head = [
        "storage",
        "finished trials",
        "workers",
        "ms per trial cycle",
        "% of smallest trial",
        f"% of a {result['reference_trial_s']:.0f} s trial",
    ]
    body = [
        [
            r["storage"],
            r["finished"],
            r["jobs"],
            f"{1e3 * r['cycle_s']:.1f}",
            f"{100 * r['share_smallest']:.1f}",
            f"{100 * r['share_reference']:.3f}",
        ]
        for r in result["rows"]
    ]
    return (
        f"study overhead per trial (read + count + ask/TPE + 6 attributes + tell), median of {result['repeats']} "
        f"cycles per worker; smallest trial trained here: {result['smallest_trial_s']:.1f} s\n" + h.table(head, body)
    )


def main(argv: list[str] | None = None) -> int:
    p = h.parser("tune", __doc__)
    p.add_argument("--finished", type=int, nargs="+", default=[10, 200], help="trials already in the study")
    p.add_argument("--jobs", type=int, default=2, help="parallel workers of the second row of each size")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--postgres", default=None, help="a PostgreSQL URL, or 'auto' for a throwaway server")
    p.add_argument("--trial-seconds", type=float, default=600.0, help="a reference trial's training time")
    args = p.parse_args(argv)
    return h.main(args, lambda a: run(a.finished, a.jobs, a.repeats, a.postgres, a.trial_seconds), format_table)


if __name__ == "__main__":
    raise SystemExit(main())
