"""Faults: SIGTERM saves last.pt and the run resumes to the same end; a full disk is reported before training."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from torch import nn

from dmlkit.config import load_config
from dmlkit.engine import run_folder
from dmlkit.engine.checkpoint import load_checkpoint
from dmlkit.engine.run_folder import RunFolder
from dmlkit.engine.signals import StopSignals, TrainingInterrupted, estimate_checkpoint_bytes
from dmlkit.assemble import build_trainer
from tests_helpers import TINY_OVERRIDES

pytestmark = pytest.mark.faults

RUN = TINY_OVERRIDES + ["train.log_every=1"]  # 8 steps, validation at 4 and 8


def _dmlkit(*args: str) -> list[str]:
    return [sys.executable, "-m", "dmlkit", *args]


def test_sigterm_writes_last_checkpoint_and_resume_finishes_like_an_uninterrupted_run(tmp_path):
    run_dir = tmp_path / "cut"
    sets = [a for o in RUN for a in ("--set", o)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        _dmlkit("train", "configs/quickstart.yaml", *sets, "--run-dir", str(run_dir), "--quiet"),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.is_file() and metrics.read_text().strip()):
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "the run logged no step within 120 s"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "SIGTERM" in err and f"--resume {run_dir}" in err
    step = load_checkpoint(run_dir / "last.pt")["loop"]["step"]
    assert 1 <= step < 8
    assert not list(run_dir.glob(".last.pt.*"))  # the atomic write left no temporary file

    done = subprocess.run(
        _dmlkit("train", "--resume", str(run_dir), "--quiet"), capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    resumed = json.loads((run_dir / "summary.json").read_text())
    assert resumed["steps"] == 8

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the subprocesses (OMP_NUM_THREADS=1): float sums depend on the thread count
    try:
        full = build_trainer(load_config("configs/quickstart.yaml", RUN), tmp_path / "full", quiet=True).fit()
    finally:
        torch.set_num_threads(threads)
    assert resumed["test"] == pytest.approx(full["test"], abs=1e-6)
    a, b = load_checkpoint(run_dir / "last.pt")["model"], load_checkpoint(tmp_path / "full" / "last.pt")["model"]
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6)


def test_stop_signals_record_the_signal_and_restore_the_handlers():
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)
        assert stop.received == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before
    err = TrainingInterrupted(signal.SIGINT, 5, "runs/x")
    assert err.exit_code == 130 and "--resume runs/x" in str(err)


def test_full_disk_is_reported_before_training(tmp_path, monkeypatch):
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(run_folder.shutil, "disk_usage", lambda path: usage(2**30, 2**30 - 2**20, 2**20))
    cfg = load_config("configs/quickstart.yaml", RUN)
    with pytest.raises(ValueError, match="MiB free"):
        build_trainer(cfg, tmp_path / "run", quiet=True).fit()
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_checkpoint_size_estimate_and_space_check(tmp_path, monkeypatch):
    model, objective = nn.Linear(10, 4), nn.Module()
    objective.proxies = nn.Parameter(torch.zeros(3, 4))
    weights = (10 * 4 + 4 + 3 * 4) * 4
    assert estimate_checkpoint_bytes(model, objective, optimizer_slots=2) == 3 * weights + 2**20
    folder = RunFolder(tmp_path)
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(run_folder.shutil, "disk_usage", lambda path: usage(2**40, 0, 50 * 2**20))
    folder.check_space(49 * 2**20)
    with pytest.raises(ValueError, match="need about 60 MiB"):
        folder.check_space(60 * 2**20)


def test_a_second_trainer_on_the_same_run_folder_is_refused(tmp_path):
    from dmlkit.engine.run_folder import RunFolder

    holder = RunFolder(tmp_path / "run")
    holder.path.mkdir()
    holder.acquire()  # as if another process were training into it
    try:
        import subprocess
        import sys

        code = f"from dmlkit.engine.run_folder import RunFolder\nRunFolder({str(tmp_path / 'run')!r}).acquire()\n"
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert result.returncode != 0 and "being written by another process" in result.stderr
    finally:
        holder.release()
    other = RunFolder(tmp_path / "run")
    other.acquire()  # free again once released
    other.release()


def _unstarted(path, *names):
    """A run folder as a run killed before its first last.pt leaves it (plus ``names``)."""
    path.mkdir()
    (path / "config.yaml").write_text("name: a\n")
    (path / "metrics.jsonl").write_text('{"split": "train", "step": 2, "loss": 1.0}\n')
    (path / ".lock").write_text("")
    (path / ".last.pt.999999999-0a1b2c3d.tmp").write_bytes(b"half a checkpoint")  # no such pid
    for name in names:
        (path / name).write_bytes(b"x")
    return RunFolder(path)


def test_a_run_folder_stopped_before_its_first_checkpoint_starts_again(tmp_path):
    folder = _unstarted(tmp_path / "run")
    with pytest.warns(RuntimeWarning, match=r"before its first checkpoint \(last logged step 2\)"):
        folder.start_new("name: b\n")
    folder.release()
    assert sorted(p.name for p in folder.path.iterdir()) == ["config.yaml"]  # the config is rewritten by the trainer


def test_the_records_a_run_writes_before_its_first_checkpoint_do_not_stop_it_starting_again(tmp_path):
    folder = _unstarted(tmp_path / "run", "classes.json")
    with pytest.raises(ValueError, match="classes.json"):  # not a file this run writes: left alone
        folder.start_new("name: b\n")
    with pytest.warns(RuntimeWarning, match="starting it again"):
        folder.start_new("name: b\n", records=("classes.json",))
    folder.release()
    assert sorted(p.name for p in folder.path.iterdir()) == ["config.yaml"]


def test_release_removes_the_lock_file_and_a_lock_taken_on_a_removed_file_is_taken_again(tmp_path, monkeypatch):
    import fcntl
    import os

    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    folder.acquire()
    folder.release()
    assert not (folder.path / ".lock").exists()  # a clean finish leaves no lock file
    real_flock, calls = fcntl.flock, []

    def flock_after_a_release(handle, flags):
        """The holder releases (unlinks .lock) between this process's open and its flock."""
        if not calls:
            os.unlink(folder.path / ".lock")
        calls.append(flags)
        return real_flock(handle, flags)

    monkeypatch.setattr(fcntl, "flock", flock_after_a_release)
    other = RunFolder(folder.path)
    other.acquire()
    assert len(calls) == 2  # the lock on the removed file guarded nothing: taken again on the file the path names
    assert os.fstat(other._lock.fileno()).st_ino == os.stat(folder.path / ".lock").st_ino
    other.release()


def test_best_pt_without_last_pt_is_kept_unless_the_same_config_starts_again(tmp_path):
    folder = _unstarted(tmp_path / "run", "best.pt")
    with pytest.raises(ValueError, match=r"best.pt but no last.pt.*--resume"):
        folder.start_new("name: other\n")
    assert (folder.path / "best.pt").is_file()
    assert not list(folder.path.glob("*.tmp"))  # the temporary file of the killed write is gone all the same
    with pytest.warns(RuntimeWarning, match="starting it again"):
        folder.start_new("name: a\n")  # the same config: its first validation writes best.pt again
    folder.release()
    with pytest.warns(RuntimeWarning, match="with its config.yaml"):
        _unstarted(tmp_path / "own", "best.pt").start_new("name: a, as loaded\n", own_config=True)


@pytest.mark.parametrize(
    "name, message",
    [
        ("last.pt", "resume it with --resume"),
        ("summary.json", "finished"),
        ("notes.txt", "notes.txt"),
    ],
)
def test_a_run_folder_with_a_checkpoint_a_result_or_other_files_is_never_overwritten(tmp_path, name, message):
    folder = _unstarted(tmp_path / "run", name)
    with pytest.raises(ValueError, match=message):
        folder.start_new("name: a\n")
    assert (folder.path / name).is_file() and (folder.path / "metrics.jsonl").is_file()
    other = RunFolder(folder.path)
    other.acquire()  # start_new released its lock
    other.release()


def test_a_torn_last_line_of_the_metrics_log_is_dropped_with_a_warning_naming_file_and_line(tmp_path):
    from dmlkit.engine.metrics_log import MetricsLog

    log = MetricsLog(tmp_path / "metrics.jsonl")
    for step in (1, 2, 3):
        log.append({"split": "train", "step": step, "loss": 0.5})
    text = log.path.read_text()
    log.path.write_text(text[: len(text) - 12])  # killed in the middle of the third append
    with pytest.warns(RuntimeWarning, match=r"metrics.jsonl' line 3 is torn"):
        assert [r["step"] for r in log.read()] == [1, 2]
    with pytest.warns(RuntimeWarning, match="line 3 is torn"):
        log.truncate_after(2)  # what a resume does: the file is whole again
    assert log.path.read_text() == "".join(text.splitlines(keepends=True)[:2])
    log.path.write_text('{"step": 1}\n{"step": \n{"step": 3}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl' line 2 is not JSON"):
        log.read()  # only the last line can be torn by a kill
