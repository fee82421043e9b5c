"""Parallel runs (``--jobs N``): threads shared out per worker, and a clean stop on SIGTERM that keeps checkpoints."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dmlkit.protocols.runs import worker_threads
from tests_helpers import TINY_OVERRIDES


def test_worker_threads_share_the_cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert [worker_threads(j) for j in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert worker_threads(2) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "junk")
    assert worker_threads(2) == 4


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _training_started(run: Path) -> bool:
    log = run / "metrics.jsonl"
    return log.is_file() and '"split": "train"' in log.read_text()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_to_the_protocol_stops_every_worker_and_keeps_checkpoints(tmp_path):
    overrides = [o for o in TINY_OVERRIDES if not o.startswith(("train.max_steps", "train.val_every"))]
    overrides += ["train.max_steps=5000", "train.val_every=1000", "plots=false", "eval.clustering=false"]
    cmd = [
        sys.executable,
        "-m",
        "dmlkit",
        "protocol",
        "holdout",
        "configs/quickstart.yaml",
        "--seeds",
        "0",
        "1",
        "2",
        "3",
        "--jobs",
        "2",
        "--out",
        str(tmp_path),
    ]
    for override in overrides:
        cmd += ["--set", override]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    runs = [tmp_path / f"quickstart-seed{s}" for s in range(4)]
    try:
        deadline = time.monotonic() + 240
        while not all(_training_started(r) for r in runs[:2]):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the two workers did not start training"
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)  # the parent only: it must pass the stop on to its workers
        _, err = proc.communicate(timeout=120)
        deadline = time.monotonic() + 30
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _group_alive(proc.pid), "a worker outlived the protocol"
    finally:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "stopped by SIGTERM" in err and "run the same command again" in err
    for run in runs[:2]:
        assert (run / "last.pt").is_file() and not (run / "summary.json").exists()
    assert not any((r / "summary.json").exists() for r in runs[2:])
