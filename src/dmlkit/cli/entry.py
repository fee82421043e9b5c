"""The process entry of the command-line tool (``dmlkit`` and ``python -m dmlkit``): run one command, exit.

A process of a multi-process torchrun job leaves with ``os._exit`` once its command has returned and its
output is flushed. The interpreter's normal shutdown runs the C++ destructors of torch.distributed's objects,
and a thread still joinable there aborts the process ("terminate called without an active exception",
SIGABRT) after the run has finished and written everything; torchrun then reports the job as failed.
The abort is intermittent (measured: 1 in 8 two-process trainings), with no Python frame on the aborting
thread, after ``destroy_process_group``. Everything dmlkit writes is written atomically and closed
before the command returns, so skipping the shutdown loses nothing. One process alone exits normally.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from dmlkit.cli import main

__all__ = ["run"]


def run() -> NoReturn:
    """Run the command of ``sys.argv`` and exit with its status."""
    code = main()
    from dmlkit.engine.launch import torchrun_world

    if torchrun_world() is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
