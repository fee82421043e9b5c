"""Two gloo processes under torchrun that fail as users' do (issue 30 item 7): one process killed mid-step, and a
checkpoint write that fails for lack of disk space on rank 0. The survivor stops at once with an error that says
what happened and how to resume, torchrun names the rank that died, nothing already written is corrupted, and
``--resume`` with two processes reaches the uninterrupted run's result."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tests_helpers import TINY_OVERRIDES

pytestmark = [pytest.mark.slow, pytest.mark.faults]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "dmlkit", "train"]
SETS = [a for o in TINY_OVERRIDES + ["plots=false"] for a in ("--set", o)]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _torchrun(args: list[str], env: dict[str, str], timeout: int) -> subprocess.CompletedProcess:
    """torchrun, started again once when a process aborted in the C++ runtime before dmlkit reported anything
    (SIGABRT, "terminate called without an active exception", right after the process group started): seen once
    in a clean-clone run on a loaded machine, not reproduced in 3 tries of the same commands; gloo races of this
    kind are reported upstream (e.g. pytorch/pytorch#188266). Any other failure is returned as it is."""
    done = subprocess.run([*TORCHRUN, *args], capture_output=True, text=True, timeout=timeout, env=env)
    aborted_at_start = "SIGABRT" in done.stderr and "terminate called without an active exception" in done.stderr
    if done.returncode != 0 and aborted_at_start and "dmlkit train:" not in done.stderr:
        done = subprocess.run([*TORCHRUN, *args], capture_output=True, text=True, timeout=timeout, env=env)
    return done


def _train(run_dir, fault: dict[str, str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return _torchrun(["configs/quickstart.yaml", *SETS, "--run-dir", str(run_dir), "--quiet"],
                     {**ENV, **(fault or {})}, timeout)


def _resume_and_compare(run_dir, uninterrupted: dict) -> None:
    resumed = _torchrun(["--resume", str(run_dir), "--quiet"], ENV, 300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((run_dir / "summary.json").read_text())["test"] == pytest.approx(uninterrupted, abs=1e-6)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    run_dir = tmp_path_factory.mktemp("full") / "run"
    done = _train(run_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((run_dir / "summary.json").read_text())["test"]


def test_one_process_killed_mid_step_stops_the_other_and_resumes(tmp_path, uninterrupted):
    run_dir = tmp_path / "cut"
    killed = _train(run_dir, {"DMLKIT_FAULT": "step:6", "DMLKIT_FAULT_RANK": "1"}, timeout=120)  # bounded
    assert killed.returncode != 0 and not (run_dir / "summary.json").exists()
    assert "rank 0 stopped at step 6: a collective with the run's other processes failed" in killed.stderr
    assert "rank      : 1" in killed.stderr and "exitcode  : -9" in killed.stderr  # torchrun names the dead rank
    assert torch.load(run_dir / "last.pt", weights_only=False)["loop"]["step"] == 4  # the step-4 checkpoint, whole
    assert not list(run_dir.glob(".*.tmp"))
    _resume_and_compare(run_dir, uninterrupted)


def test_a_full_disk_on_rank_zero_stops_both_and_resumes(tmp_path, uninterrupted):
    run_dir = tmp_path / "full-disk"
    failed = _train(run_dir, {"DMLKIT_FAULT": "write:last.pt@2", "DMLKIT_FAULT_SIGNAL": "ENOSPC",
                              "DMLKIT_FAULT_RANK": "0"}, timeout=120)
    assert failed.returncode != 0 and not (run_dir / "summary.json").exists()
    assert "could not write last.pt at step 8 (No space left on device" in failed.stderr
    assert "the previous one is kept whole" in failed.stderr
    assert "rank 1 stopped at step 8" in failed.stderr
    assert torch.load(run_dir / "last.pt", weights_only=False)["loop"]["step"] == 4
    assert not list(run_dir.glob(".*.tmp"))
    _resume_and_compare(run_dir, uninterrupted)
