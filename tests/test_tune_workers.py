"""dmlkit tune with several workers: a worker killed (-9) mid-trial on the local journal and on PostgreSQL
(its trial is retried once, from the run folder's last.pt, and the study still reaches its trial count), and
K worker processes sharing one study under one global trial cap."""

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import optuna

from dmlkit.cli import main
from dmlkit.tune import SearchSettings, tune
from dmlkit.tune.storage import open_storage
from dmlkit.tune.workers import counted_trials, origin_number
from postgres_server import postgres_database, postgres_url  # noqa: F401  (pytest fixtures)
from tests_helpers import TINY_OVERRIDES

CONFIG = "configs/quickstart.yaml"
QUICK = [*TINY_OVERRIDES, "eval.clustering=false", "train.max_steps=6", "train.val_every=2", "train.patience=5"]


def _command(out, trials, *extra):
    sets = sum((["--set", o] for o in QUICK), [])
    return ["tune", CONFIG, "--out", str(out), "--trials", str(trials), "--sampler", "random", "--quiet", *sets, *extra]


def _killed_at_step_5(argv, cwd):
    """Run ``dmlkit ARGV`` in a fresh process that kills itself (-9) right after its first training step 5."""
    env = {**os.environ, "DMLKIT_FAULT": "step:5"}
    done = subprocess.run(
        [sys.executable, "-m", "dmlkit", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == -9, done.stderr[-2000:]


def _trials(out, storage=None):
    study = optuna.load_study(
        study_name=out.resolve().name if storage is None else "shared", storage=open_storage(out, storage)
    )
    return sorted(study.get_trials(), key=lambda t: t.number)


def _check_retried_once(out, storage=None):
    trials = _trials(out, storage)
    killed = trials[0]
    assert killed.state.name == "FAIL"
    if storage is None:  # on PostgreSQL Optuna's heartbeat fails it, with no reason of ours
        assert killed.user_attrs["fail_reason"] == "its worker process died; retried"
    retries = [t for t in trials if t.number > 0 and origin_number(t) == 0]
    assert len(retries) == 1 and retries[0].state.name == "COMPLETE"
    counted = counted_trials(trials)
    assert killed not in counted and len(counted) == 3
    run = out / "trials" / "0000"
    assert json.loads((run / "environment.json").read_text())["resumes"][0]["step"] == 4  # from last.pt, not step 0
    assert json.loads((run / "summary.json").read_text())["steps"] == 6
    assert sorted(p.name for p in (out / "trials").iterdir()) == sorted(f"{origin_number(t):04d}" for t in counted)


def test_a_retry_interrupted_again_counts_once_through_its_last_retry():
    """Trial 0 interrupted, its retry (1) interrupted too, the retry of that (2) completes: one trial of the cap,
    run in trial 0's folder (Optuna names only the series' first as the retried one; 1 must not count too)."""
    from optuna.trial import TrialState

    from dmlkit.tune.storage import retry_callback

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    for value in (None, None, 0.5):  # the series: two interruptions, then a value
        trial = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
        if value is None:
            study.tell(trial, state=TrialState.FAIL)
            retry_callback()(study, study.trials[trial.number])
        else:
            study.tell(trial, value)
    other = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    study.tell(other, 0.25)
    trials = study.get_trials()
    assert [t.number for t in counted_trials(trials)] == [2, 3]
    assert [origin_number(t) for t in trials] == [0, 0, 0, 3]


def test_killed_local_worker_is_retried_from_its_last_checkpoint(tmp_path):
    out = tmp_path / "study"
    _killed_at_step_5(_command(out, 3), os.getcwd())
    assert [t.state.name for t in _trials(out)] == ["RUNNING"]
    assert main(_command(out, 3)) == 0  # the same command again: the dead worker's trial is found by its lock
    _check_retried_once(out)
    rows = (out / "trials.md").read_text().splitlines()[2:]
    assert [row.split(" | ")[1] for row in rows] == ["0", "2", "3"]  # trial 1 (the retry) runs in trial 0's folder


def test_parallel_workers_share_one_trial_cap(tmp_path):
    result = tune(
        CONFIG, trials=3, out=tmp_path, overrides=QUICK, settings=SearchSettings(sampler="random", seed=0), jobs=2
    )
    trials = result.study.get_trials()
    counted = counted_trials(trials)
    assert len(counted) == 3 and all(t.state.name == "COMPLETE" for t in counted)
    assert len({t.user_attrs["worker"] for t in counted}) == 2  # both processes ran trials
    assert len(list(tmp_path.glob("trials/*/summary.json"))) == 3
    assert {t.params["loss.params.alpha"] for t in counted} and len({tuple(t.params.items()) for t in counted}) == 3


def test_killed_worker_on_postgresql_is_retried_by_another(tmp_path, postgres_database):
    out = tmp_path / "study"
    shared = ["--storage", postgres_database, "--study-name", "shared", "--heartbeat", "1"]
    _killed_at_step_5(_command(out, 3, *shared), os.getcwd())
    time.sleep(5)  # past the grace period of 4 missed heartbeats
    other = subprocess.run(
        [sys.executable, "-m", "dmlkit", *_command(out, 3, *shared)], capture_output=True, text=True, timeout=300
    )
    assert other.returncode == 0, other.stderr[-2000:]
    _check_retried_once(out, postgres_database)


def _children(pid: int) -> dict[int, str]:
    """The child processes of ``pid`` and their states (``T``: stopped), read from /proc."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended while /proc was read
            continue
        if int(fields[1]) == pid:
            children[int(stat.parent.name)] = fields[0]
    return children


def _has_pending(pid: int, signum: int) -> bool:
    """Whether ``signum`` waits, undelivered, for process ``pid`` (its SigPnd / ShdPnd masks in /proc)."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    masks = [int(line.split()[1], 16) for line in status if line.startswith(("SigPnd:", "ShdPnd:"))]
    return any(mask >> (signum - 1) & 1 for mask in masks)


def _wait_for(condition, what: str, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_sigterm_stops_parallel_workers_and_the_next_run_resumes_their_trials(tmp_path):
    """The GPU script's deadline: SIGTERM to `dmlkit tune --jobs 2` stops both workers after their trials' last.pt;
    the same command then finishes the study, the interrupted trials resumed, not restarted.

    No race with the clock: each worker stops itself (SIGSTOP) after its step 5, so the SIGTERM reaches two
    workers that are both mid-trial however slowly either started; they go on once it is pending."""
    import signal

    out = tmp_path / "study"
    argv = [sys.executable, "-m", "dmlkit", *_command(out, 2, "--jobs", "2")]
    argv[argv.index("train.max_steps=6")] = "train.max_steps=40"
    env = {**os.environ, "DMLKIT_FAULT": "step:5", "DMLKIT_FAULT_SIGNAL": "STOP"}
    tuner = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        stopped = lambda: [pid for pid, state in _children(tuner.pid).items() if state == "T"]  # noqa: E731
        _wait_for(lambda: len(stopped()) == 2 or tuner.poll() is not None, "both workers at step 5")
        workers = stopped()
        assert len(workers) == 2, tuner.communicate()[1][-2000:]
        tuner.send_signal(signal.SIGTERM)
        _wait_for(lambda: all(_has_pending(pid, signal.SIGTERM) for pid in workers), "the forwarded SIGTERM")
        for pid in workers:
            os.kill(pid, signal.SIGCONT)
        _, err = tuner.communicate(timeout=180)
    finally:
        if tuner.poll() is None:  # a failed wait: leave no stopped worker behind
            for pid in _children(tuner.pid):
                os.kill(pid, signal.SIGKILL)
            tuner.kill()
            tuner.communicate()
    assert tuner.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "resume from their last.pt" in err
    assert (out / "trials.md").is_file()  # written on the way out
    trials = _trials(out)
    assert sorted(t.state.name for t in trials) == ["FAIL", "FAIL", "WAITING", "WAITING"]
    assert main(_command(out, 2, "--set", "train.max_steps=40")) == 0
    for run in out.glob("trials/*"):
        resumes = json.loads((run / "environment.json").read_text())["resumes"]
        assert resumes and resumes[0]["step"] >= 5, run  # from the SIGTERM's last.pt, not step 0
        assert json.loads((run / "summary.json").read_text())["steps"] > resumes[0]["step"]  # trained on
    assert len(counted_trials(_trials(out))) == 2 and len(list(out.glob("trials/*"))) == 2


def test_gpu_tuning_script_runs_its_studies_and_continues_them_from_their_archive(tmp_path):
    """scripts/gpu_font_testbed_tune.sh on this machine (no .debs, no wheels), on the quickstart config: the
    studies reach their trials, trials.md and the archive come back, and a second call from the archive goes on."""
    root = os.getcwd()
    env = {
        **os.environ,
        "INSTALL_DEBS": "0",
        "INSTALL_WHEELS": "0",
        "PYTHON": sys.executable,
        "CONFIG_DIR": "configs",
        "LOSSES": "quickstart",
        "TRIALS": "1",
        "JOBS": "1",
        "TRAIN_SECONDS": "200",
        "OUT_DIR": str(tmp_path / "out"),
        "STUDIES": "runs/test-gpu-tune",
        "SETS": " ".join(f"--set {o}" for o in QUICK),
    }
    try:
        first = subprocess.run(
            ["bash", "scripts/gpu_font_testbed_tune.sh"], env=env, capture_output=True, text=True, timeout=400, cwd=root
        )
        assert first.returncode == 0, first.stderr[-2000:]
        assert "## quickstart" in (tmp_path / "out" / "trials.md").read_text()
        archive = tmp_path / "studies.tar.gz"
        os.replace(tmp_path / "out" / "studies.tar.gz", archive)
        with tarfile.open(archive) as packed:  # checkpoints would outgrow the 16 MiB a returned file may have
            names = packed.getnames()
        assert any(name.endswith("/summary.json") for name in names)
        assert not [name for name in names if name.endswith(".pt")]
        assert not (tmp_path / "out" / "resume.tar.gz").exists()  # every trial complete: nothing to resume
        subprocess.run(["rm", "-rf", "runs/test-gpu-tune"], cwd=root, check=True)
        again = subprocess.run(
            ["bash", "scripts/gpu_font_testbed_tune.sh"],
            env={**env, "TRIALS": "2", "STUDIES_TAR": str(archive)},
            capture_output=True,
            text=True,
            timeout=400,
            cwd=root,
        )
        assert again.returncode == 0, again.stderr[-2000:]
        table = (tmp_path / "out" / "trials.md").read_text()
        assert table.count("| complete |") == 2  # the archived trial kept, one more trained
    finally:
        subprocess.run(["rm", "-rf", "runs/test-gpu-tune"], cwd=root)
