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

RUN = TINY_OVERRIDES + ["train.log_every=1"]  # 8 steps, validation at 4 and 8


def _dmlkit(*args: str) -> list[str]:
    return [sys.executable, "-m", "dmlkit", *args]


def test_sigterm_writes_last_checkpoint_and_resume_finishes_like_an_uninterrupted_run(tmp_path):
    run_dir = tmp_path / "cut"
    sets = [a for o in RUN for a in ("--set", o)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(_dmlkit("train", "configs/quickstart.yaml", *sets, "--run-dir", str(run_dir), "--quiet"),
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, text=True)
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

    done = subprocess.run(_dmlkit("train", "--resume", str(run_dir), "--quiet"), capture_output=True, text=True, env=env, timeout=300)
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

        code = (
            "from dmlkit.engine.run_folder import RunFolder\n"
            f"RunFolder({str(tmp_path / 'run')!r}).acquire()\n"
        )
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert result.returncode != 0 and "being written by another process" in result.stderr
    finally:
        holder.release()
    other = RunFolder(tmp_path / "run")
    other.acquire()  # free again once released
    other.release()
