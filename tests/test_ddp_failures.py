"""Two gloo processes under torchrun that fail as users' do: one process killed mid-step, and a
checkpoint write that fails for lack of disk space on rank 0. The survivor stops at once with an error that says
what happened and how to resume, torchrun names the rank that died, nothing already written is corrupted, and
``--resume`` with two processes reaches the uninterrupted run's result."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from tests_helpers import TINY_OVERRIDES, torchrun

pytestmark = [pytest.mark.slow, pytest.mark.faults]
SETS = [a for o in TINY_OVERRIDES + ["plots=false"] for a in ("--set", o)]


def _train(run_dir, fault: dict[str, str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return torchrun(["train", "configs/quickstart.yaml", *SETS, "--run-dir", str(run_dir), "--quiet"], fault, timeout)


def _resume_and_compare(run_dir, uninterrupted: dict) -> None:
    resumed = torchrun(["train", "--resume", str(run_dir), "--quiet"])
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
    failed = _train(
        run_dir,
        {"DMLKIT_FAULT": "write:last.pt@2", "DMLKIT_FAULT_SIGNAL": "ENOSPC", "DMLKIT_FAULT_RANK": "0"},
        timeout=120,
    )
    assert failed.returncode != 0 and not (run_dir / "summary.json").exists()
    assert "could not write last.pt at step 8 (No space left on device" in failed.stderr
    assert "the previous one is kept whole" in failed.stderr
    assert "rank 1 stopped at step 8" in failed.stderr
    assert torch.load(run_dir / "last.pt", weights_only=False)["loop"]["step"] == 4
    assert not list(run_dir.glob(".*.tmp"))
    _resume_and_compare(run_dir, uninterrupted)
