"""Deterministic fault injection: kill (or signal) this process at a named point, for the fault-injection tests.

Set ``DMLKIT_FAULT=<point>[@<n>]`` in the environment of a ``dmlkit`` process and it sends itself
``SIGKILL`` (or the signal named by ``DMLKIT_FAULT_SIGNAL``, e.g. ``TERM``) the ``n``-th time
(default 1) it reaches ``<point>``. Unset, ``fault_point`` returns at once and costs one
environment lookup. The points:

- ``write:<file name>``: inside ``dmlkit.io.atomic_write`` of that file, after the data went into
  the temporary file and before it replaces the file (``write:last.pt@2`` kills the second
  write of ``last.pt``, leaving its temporary file behind);
- ``step:<k>``: in training, right after the optimiser step ``k``, before any validation or
  checkpoint of that step;
- ``final_test``: in training, when the test of the best weights begins.

``DMLKIT_FAULT_SIGNAL=ENOSPC`` raises the ``OSError`` of a full disk there instead of a signal, and
``DMLKIT_FAULT_RANK=<r>`` limits the fault to the process of rank ``r`` (torchrun's ``RANK``; 0 without it),
so that one process of several fails. This is how ``tests/test_fault_injection.py`` places a ``kill -9`` exactly, instead of racing a
timer against the process. The only state is the per-process count of each point reached.
"""

from __future__ import annotations

import errno
import os
import signal

__all__ = ["FAULT_ENV", "FAULT_RANK_ENV", "FAULT_SIGNAL_ENV", "fault_point"]

FAULT_ENV = "DMLKIT_FAULT"
FAULT_SIGNAL_ENV = "DMLKIT_FAULT_SIGNAL"
FAULT_RANK_ENV = "DMLKIT_FAULT_RANK"

_reached: dict[str, int] = {}  # point -> times reached in this process


def _target(spec: str) -> tuple[str, int]:
    point, _, nth = spec.partition("@")
    try:
        count = int(nth) if nth else 1
    except ValueError:
        raise ValueError(f"{FAULT_ENV}={spec!r}: write <point>[@<n>] with an integer n, e.g. write:last.pt@2") from None
    return point, count


def fault_point(name: str) -> None:
    """Signal this process if ``DMLKIT_FAULT`` names ``name`` and this is its ``n``-th arrival (see the module docstring)."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    point, count = _target(spec)
    if point != name:
        return
    rank = os.environ.get(FAULT_RANK_ENV)
    if rank is not None and rank != os.environ.get("RANK", "0"):
        return
    _reached[name] = _reached.get(name, 0) + 1
    if _reached[name] == count:
        kind = os.environ.get(FAULT_SIGNAL_ENV, "KILL").upper()
        if kind == "ENOSPC":  # a full disk, as the write would report it
            raise OSError(errno.ENOSPC, f"No space left on device (DMLKIT_FAULT at {name})")
        os.kill(os.getpid(), signal.Signals[f"SIG{kind.removeprefix('SIG')}"])
