"""Fault injection: kill -9 at exact points (``DMLKIT_FAULT``, see ``dmlkit.faults``), then continue and compare.

Each killed run is a ``dmlkit train`` subprocess that sends itself SIGKILL at a named point: after
an optimiser step, or inside the atomic write of a checkpoint (its temporary file written, not yet
renamed). The run is then continued in this process with the command a user would type (the
same command, or ``--resume``) and must end with the weights and test metrics of an uninterrupted
run. Config errors are each followed by the corrected command in the same run folder; an embedding job
killed inside a chunk write resumes to the embeddings of an uninterrupted job. Runs are tiny (8
steps on a few glyph classes) so the file takes about two minutes on 2 cores. With the NaN-weight
tests of test_export / test_embed_images / test_engine and the signal tests of test_faults it forms
the fault-injection suite: ``pytest -m faults``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from dmlkit.cli import main
from dmlkit.engine.checkpoint import load_checkpoint
from tests_helpers import TINY_OVERRIDES

pytestmark = pytest.mark.faults

RUN = TINY_OVERRIDES + ["train.log_every=1", "plots=false"]  # 8 steps, validation (and checkpoints) at 4 and 8
SETS = [a for o in RUN for a in ("--set", o)]
CONFIG = "configs/quickstart.yaml"


def _one_thread(fn, *args):
    """Run ``fn`` with one intra-op thread, as the subprocesses (float sums depend on the thread count)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fn(*args)
    finally:
        torch.set_num_threads(threads)


def _killed(fault: str, *args: str) -> subprocess.CompletedProcess:
    """``dmlkit ARGS`` in a subprocess told to SIGKILL itself at ``fault``; it must die by that signal."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DMLKIT_FAULT": fault}
    proc = subprocess.run([sys.executable, "-m", "dmlkit", *args], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == -9, f"not killed at {fault}: rc {proc.returncode}\n{proc.stderr[-2000:]}"
    return proc


def _train(run_dir, *extra: str) -> list[str]:
    return ["train", CONFIG, *SETS, *extra, "--run-dir", str(run_dir), "--quiet"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run: its summary, its last weights and its folder."""
    run_dir = tmp_path_factory.mktemp("faults") / "reference"
    assert _one_thread(main, _train(run_dir)) == 0
    return json.loads((run_dir / "summary.json").read_text()), load_checkpoint(run_dir / "last.pt")["model"], run_dir


def _same_as_reference(run_dir, reference) -> None:
    summary, weights, _ = reference
    resumed = json.loads((run_dir / "summary.json").read_text())
    assert resumed["steps"] == summary["steps"] and resumed["best_step"] == summary["best_step"]
    assert resumed["test"] == pytest.approx(summary["test"], abs=1e-6)
    mine = load_checkpoint(run_dir / "last.pt")["model"]
    for key in weights:
        torch.testing.assert_close(mine[key], weights[key], rtol=0, atol=1e-6)
    tests = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if r["split"] == "test"]
    assert len(tests) == 1
    assert not list(run_dir.glob(".*.tmp")), "a temporary file of a killed write was left"


@pytest.mark.parametrize(
    "fault, before, again",
    [
        # killed before the first checkpoint: nothing to resume; the same command starts the run again
        ("step:2", {"config.yaml"}, "same command"),
        # killed inside the first write of last.pt: best.pt of step 4 and a temporary file are left
        ("write:last.pt@1", {"config.yaml", "best.pt", "metrics.jsonl"}, "--resume"),
        # killed inside the second write of last.pt: last.pt of step 4 is intact
        ("write:last.pt@2", {"config.yaml", "best.pt", "last.pt", "metrics.jsonl"}, "--resume"),
    ],
)
def test_a_run_killed_at_a_fault_point_continues_to_the_uninterrupted_result(tmp_path, reference, fault, before, again):
    run_dir = tmp_path / "run"
    _killed(fault, *_train(run_dir))
    assert before <= {p.name for p in run_dir.iterdir()} and not (run_dir / "summary.json").exists()
    if fault.startswith("write:"):
        assert list(run_dir.glob(".last.pt.*.tmp")), "the kill was not inside the write"
    args = ["train", "--resume", str(run_dir), "--quiet"] if again == "--resume" else _train(run_dir)
    assert _one_thread(main, args) == 0
    _same_as_reference(run_dir, reference)


CONFIG_ERRORS = [  # (bad override, what the error says): every one of them used to leave a folder behind
    ("loss.name=tripplet", "unknown loss"),
    ("loss.miner=hardest", "unknown miner"),
    ("data.name=glyph", "unknown dataset"),
    ("model.backbone=resnet21", "unknown model.backbone"),
    ("train.optimizer=adamm", "unknown train.optimizer"),
    ("model.embedding_dim=0", "embedding_dim"),
    ("loss.params.alpah=2", "unknown parameter"),
    ("train.batch_size=18", "not a multiple of m"),
    ("train.val_metric=map_at_r", "train.val_metric"),
    ("eval.ks=[0]", "eval.ks"),
    ("data.max_classes=3", "classes per batch"),  # 2 training classes for batches of 4 classes
]


@pytest.mark.parametrize("bad, says", CONFIG_ERRORS, ids=[b for b, _ in CONFIG_ERRORS])
def test_a_config_error_is_followed_by_the_corrected_command(tmp_path, capsys, bad, says):
    run_dir = tmp_path / "runs" / "quickstart"
    quick = ["--set", "train.max_steps=2", "--set", "train.val_every=2", "--set", "eval.clustering=false"]
    assert _one_thread(main, _train(run_dir, *quick, "--set", bad)) == 2
    assert says in capsys.readouterr().err
    assert not run_dir.exists()  # found before the run folder is made
    assert _one_thread(main, _train(run_dir, *quick)) == 0
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 2


def test_a_torn_last_line_of_the_metrics_log_does_not_stop_the_resume(tmp_path, reference, capsys):
    run_dir = tmp_path / "run"
    _killed("step:6", *_train(run_dir))  # mid-epoch, after the checkpoint of step 4
    log = run_dir / "metrics.jsonl"
    text = log.read_text()
    lines = len(text.splitlines())
    log.write_text(text[: len(text) - 20])  # as if killed in the middle of the last append
    assert _one_thread(main, ["train", "--resume", str(run_dir), "--quiet"]) == 0
    assert f"'{log}' line {lines} is torn" in capsys.readouterr().err
    _same_as_reference(run_dir, reference)


def test_resuming_a_finished_run_changes_nothing_and_says_so(tmp_path, reference, capsys):
    import shutil

    run_dir = tmp_path / "done"
    shutil.copytree(reference[2], run_dir)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    assert _one_thread(main, ["train", "--resume", str(run_dir), "--quiet"]) == 0
    assert "finished run" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before


def test_sigterm_during_the_final_test_exits_143_and_resume_runs_the_test_once(tmp_path, reference):
    run_dir = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DMLKIT_FAULT": "final_test", "DMLKIT_FAULT_SIGNAL": "TERM"}
    proc = subprocess.run(
        [sys.executable, "-m", "dmlkit", *_train(run_dir)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 143, proc.stderr[-2000:]
    assert "during the final test" in proc.stderr and f"dmlkit train --resume {run_dir}" in proc.stderr
    assert not (run_dir / "summary.json").exists() and (run_dir / "last.pt").is_file()
    assert _one_thread(main, ["train", "--resume", str(run_dir), "--quiet"]) == 0
    _same_as_reference(run_dir, reference)  # one test record, the uninterrupted metrics


def test_an_embedding_job_killed_inside_a_chunk_write_resumes_to_the_same_embeddings(tmp_path, reference):
    import numpy as np

    from dmlkit.search import embed_images
    from search_helpers import write_glyph_folder

    run_dir = reference[2]
    folder, _ = write_glyph_folder(tmp_path / "images", max_classes=3)
    out = tmp_path / "emb.npy"
    args = ["embed", str(run_dir), "--images", str(folder), "--out", str(out), "--chunk-size", "8", "--quiet"]
    _killed("write:chunk-000001.npy", *args)  # the first chunk saved, the second half-written
    parts = tmp_path / "emb.parts"
    assert (parts / "chunk-000000.npy").is_file() and list(parts.glob(".chunk-000001.npy.*.tmp"))
    assert not (parts / "chunk-000001.npy").exists() and not out.exists()
    _killed("write:chunk-000002.npy", *args)  # started again: chunk 1 done now, killed inside chunk 2
    assert [p.name.split(".")[1] for p in parts.glob(".*.tmp")] == ["chunk-000002"]  # the first kill's file is gone
    assert _one_thread(main, args) == 0
    assert not parts.exists() and not list(tmp_path.glob(".*.tmp"))
    whole = embed_images(run_dir, folder, tmp_path / "whole.npy", chunk_size=8, quiet=True)
    np.testing.assert_array_equal(np.load(out), np.load(whole.embeddings))
