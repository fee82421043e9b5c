"""The process entry (``cli.entry.run``): one process of a torchrun job leaves without the interpreter's
shutdown (``os._exit``) once its command returned and its output is flushed; a process alone exits normally.
The shutdown is observed through an ``atexit`` hook, which ``os._exit`` skips."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = (
    "import atexit, sys; atexit.register(lambda: print('interpreter shutdown ran')); "
    "sys.argv = ['dmlkit', 'data', 'list']; from dmlkit.cli.entry import run; run()"
)


@pytest.mark.parametrize("torchrun_env, shutdown", [({}, True), ({"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}, False)])
def test_a_process_of_a_torchrun_job_skips_the_shutdown_and_keeps_its_output(torchrun_env, shutdown):
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "LOCAL_WORLD_SIZE")}
    env.update(PYTHONPATH=str(ROOT / "src"), **torchrun_env)
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "glyphs" in done.stdout  # the command's output reached the pipe before the exit
    assert ("interpreter shutdown ran" in done.stdout) == shutdown


def test_the_exit_status_is_the_commands():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    program = PROGRAM.replace("'data', 'list'", "'train'")
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and "dmlkit train needs a CONFIG file" in done.stderr
