"""The device check script in its CPU mode (``scripts/device_check.sh --cpu``): every section runs and
reports, so that on a lent GPU machine the script cannot fail for a trivial reason."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_cpu_mode_runs_every_section_and_writes_the_tables(tmp_path):
    # BUDGET is a ceiling (the sections end on their own in about 4 minutes on 2 idle cores); under load a 300 s
    # ceiling left the testbed section no time and it was skipped ("no time left")
    env = {**os.environ, "OUT": str(tmp_path), "BUDGET": "1200"}
    done = subprocess.run(
        [
            "bash",
            "scripts/device_check.sh",
            "--cpu",
            "--testbed",
            "configs/quickstart.yaml",
            "--seeds",
            "0",
            "--jobs",
            "1",
            "--set",
            "train.max_steps=2",
            "--set",
            "train.val_every=2",
            "--set",
            "data.max_classes=20",
            "--set",
            "plots=false",
            "--set",
            "eval.clustering=false",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "device_check.json").read_text())
    assert list(results) == ["environment", "cuda_tests", "training", "exact_search", "execution", "testbed"]
    assert all(r["ok"] for r in results.values()), results
    assert results["cuda_tests"]["returncode"] == 0 and results["cuda_tests"]["skipped"] > 0
    rows = results["training"]["rows"]
    assert [r["precision"] for r in rows] == ["32-true", "bf16-mixed"]
    assert all(r["trainer_images_per_s"] > 0 and r["bare_images_per_s"] > 0 for r in rows)
    assert results["exact_search"]["parity_same_neighbours"] is True
    assert 0 < results["exact_search"]["map_at_r"] < 1
    assert "| quickstart (n=1) |" in results["testbed"].get("table", ""), results["testbed"]
    assert [(r["channels_last"], r["compile"]) for r in results["execution"]["rows"]] == [
        (False, False),
        (True, False),
        (False, False),
        (True, False),
    ]
    assert all(r["images_per_s"] > 0 for r in results["execution"]["rows"])
    report = (tmp_path / "device_check.md").read_text()
    assert "| bf16-mixed | 3 x 16 |" in report
    assert results["training"]["loader_images_per_s"] > 0 and all(r["compute_images_per_s"] > 0 for r in rows)


def test_the_cuda_tests_keep_time_for_later_sections_only_when_some_will_run():
    from benchmarks.device_check import cuda_tests_seconds

    assert cuda_tests_seconds(80.0, later_sections=False) == 80.0  # --only environment cuda_tests
    assert cuda_tests_seconds(80.0, later_sections=True) == 30.0  # the floor
    assert cuda_tests_seconds(200.0, later_sections=True) == 140.0
    assert cuda_tests_seconds(1000.0, later_sections=False) == 150.0  # the ceiling


def test_a_stopped_pytest_run_is_counted_from_its_progress_lines():
    from benchmarks.device_check import pytest_progress

    printed = (
        "tests/test_cuda_paths.py\n..F.s.....                                [ 40%]\n..E.\nImportError in a name...\n"
    )
    assert pytest_progress(printed) == {"passed": 11, "failed": 2, "skipped": 1}
    assert pytest_progress("") == {"passed": 0, "failed": 0, "skipped": 0}
