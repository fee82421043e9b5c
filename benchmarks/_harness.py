"""What every benchmark shares: command line, worker subprocesses, peak memory, timing, tables.

A benchmark is a module ``benchmarks/NAME.py`` with ``run(...) -> result``, ``format_table(result) -> str``
and ``main(argv) -> int``; it runs as ``python -m benchmarks.NAME`` from the repository root and as
``dmlkit bench NAME`` (add it to ``BENCHMARKS`` in ``src/dmlkit/cli.py``). Benchmarks import this module,
never each other's private names.

Command line
    ``parser(name, doc, workers=())`` -- an ``ArgumentParser`` with ``prog="dmlkit bench NAME"``, the
    first line of ``doc`` as description and ``--json``; with ``workers`` also a hidden ``--worker SIDE``.
    ``main(args, run, table, worker=None, ok=None)`` -- the whole ``main``: with ``--worker`` prints
    ``worker(args)`` as one JSON line (the protocol :func:`run_worker` reads); otherwise
    ``result = run(args)``, prints ``table(result)`` (or the JSON with ``--json``) and returns 0, or 1
    when ``ok(result)`` is false.

Worker subprocesses (memory of one call in a fresh process, so that nothing measured before pollutes it)
    ``run_worker(module, side, argv) -> dict`` -- runs ``python -m MODULE --worker SIDE *argv`` with the
    repository root on ``PYTHONPATH``, raises ``RuntimeError`` with the worker's stderr if it fails, and
    returns the JSON of its last stdout line.

Peak memory and wall time of one call
    ``measure(fn, warmup=0) -> Measurement`` -- runs ``fn`` ``warmup`` times untimed, frees what the
    allocator can give back, records the resident set size (RSS), resets the kernel's peak-RSS counter
    (``/proc/self/clear_refs``), runs ``fn()`` once under a wall clock and reads the peak (``VmHWM``).
    ``Measurement``: ``seconds``, ``peak_extra_bytes`` (peak RSS minus RSS before the call),
    ``peak_anon_bytes`` (the same for anonymous memory, i.e. heap, not file-backed pages such as a
    memory-mapped file; always sampled), ``probe`` (how the peak was found), ``value`` (what ``fn``
    returned). A thread reading ``/proc/self/statm`` every millisecond gives the anonymous peak, and
    the RSS peak where the counter cannot be reset (it may then miss spikes shorter than that).
    ``Measurement.as_dict()`` is its JSON form for worker output.

Timing
    ``interleaved(fns, repeats, warmup=0, sync=None) -> {name: [seconds, ...]}`` -- every function of
    the dict ``warmup`` times untimed, then ``repeats`` rounds that call each once in turn (round-robin,
    so that load from other processes hits all alike); ``sync`` (e.g. ``torch.cuda.synchronize``) is
    called before starting and before stopping each clock. Aligned lists: ``zip`` them for per-round
    ratios. ``median_time(fn, repeats, warmup=0, sync=None) -> float`` -- the median for one function.

Tables
    ``table(head, rows) -> str`` -- columns fitted to their widest cell, the first left-aligned, the
    others right-aligned; cells are strings (format numbers before, e.g. ``f"{ratio:.2f}x"``).
    ``MIB`` = 2**20.

A new benchmark, e.g. steps/s of the trainer against a bare loop, is then about::

    from benchmarks import _harness as h

    def run(steps=20, warmup=2):
        times = h.interleaved({"trainer": trainer_step, "bare": bare_step}, steps, warmup)
        ...
        return {"rows": [...]}

    def format_table(r):
        return h.table(["loop", "steps/s", "vs bare"], [[...], ...])

    def _parser():
        p = h.parser("train", __doc__)
        p.add_argument("--steps", type=int, default=20)
        return p

    def main(argv=None):
        return h.main(_parser().parse_args(argv), lambda a: run(a.steps), format_table)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

__all__ = [
    "MIB",
    "ROOT",
    "Measurement",
    "interleaved",
    "main",
    "measure",
    "median_time",
    "parser",
    "run_worker",
    "table",
]

#: The repository root (the folder holding ``benchmarks/``, ``src/`` and ``configs/``).
ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20


# --------------------------------------------------------------------------- command line


def parser(name: str, doc: str | None, workers: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The benchmark's parser: ``prog``, description (first line of ``doc``), ``--json``, hidden ``--worker``."""
    p = argparse.ArgumentParser(prog=f"dmlkit bench {name}", description=(doc or "").strip().splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    if workers:
        p.add_argument("--worker", choices=list(workers), help=argparse.SUPPRESS)
    return p


def main(
    args: argparse.Namespace,
    run: Callable[[argparse.Namespace], Any],
    table: Callable[[Any], str],
    worker: Callable[[argparse.Namespace], Mapping[str, Any]] | None = None,
    ok: Callable[[Any], bool] | None = None,
) -> int:
    """Worker mode prints one JSON line; otherwise run, print the table (or JSON), return 0 (1 if not ``ok``)."""
    if getattr(args, "worker", None):
        if worker is None:
            raise ValueError("this benchmark has no worker mode")
        print(json.dumps(worker(args)))
        return 0
    result = run(args)
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0 if ok is None or ok(result) else 1


# --------------------------------------------------------------------------- worker subprocesses


def run_worker(module: str, side: str, argv: Sequence[str]) -> dict[str, Any]:
    """``python -m MODULE --worker SIDE *argv`` in a fresh process; the JSON of its last stdout line."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", module, "--worker", side, *map(str, argv)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark worker {module} {side!r} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- peak memory


def _statm() -> tuple[int, int]:
    """(resident, anonymous resident) bytes; anonymous = resident - file-backed/shared pages (= ``RssAnon``)."""
    with open("/proc/self/statm") as fh:
        fields = fh.read().split()
    page = os.sysconf("SC_PAGE_SIZE")
    return int(fields[1]) * page, (int(fields[1]) - int(fields[2])) * page


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"{field} not in /proc/self/status")


def _reset_peak() -> bool:
    """Reset ``VmHWM`` to the current RSS; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _trim() -> None:
    """Collect garbage and hand freed heap back to the system, so that the baseline RSS is honest."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class _Sampler(threading.Thread):
    """Largest RSS and anonymous RSS seen, polled every ``interval`` seconds until :meth:`stop`."""

    def __init__(self, interval: float = 0.001) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.rss, self.anon = _statm()
        self._done = threading.Event()

    def _sample(self) -> None:
        rss, anon = _statm()
        self.rss, self.anon = max(self.rss, rss), max(self.anon, anon)

    def run(self) -> None:
        while not self._done.is_set():
            self._sample()
            time.sleep(self.interval)

    def stop(self) -> tuple[int, int]:
        self._done.set()
        self.join()
        self._sample()
        return self.rss, self.anon


@dataclass
class Measurement:
    """Wall time and peak extra memory of one call (see :func:`measure`)."""

    seconds: float
    peak_extra_bytes: int
    peak_anon_bytes: int
    probe: str
    value: Any = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure(fn: Callable[[], Any], warmup: int = 0) -> Measurement:
    """Run ``fn`` ``warmup`` times, then once more under a wall clock and the peak-memory probes."""
    for _ in range(warmup):
        fn()
    _trim()
    rss0, anon0 = _statm()
    exact = _reset_peak()
    sampler = _Sampler()
    sampler.start()
    t0 = time.perf_counter()
    value = fn()
    seconds = time.perf_counter() - t0
    rss, anon = sampler.stop()
    peak = max(_status_bytes("VmHWM"), rss) if exact else rss
    return Measurement(
        seconds=seconds,
        peak_extra_bytes=max(0, peak - rss0),
        peak_anon_bytes=max(0, anon - anon0),
        probe="VmHWM after clear_refs" if exact else "RSS sampled every 1 ms",
        value=value,
    )


# --------------------------------------------------------------------------- timing


def interleaved(
    fns: Mapping[str, Callable[[], Any]],
    repeats: int,
    warmup: int = 0,
    sync: Callable[[], Any] | None = None,
) -> dict[str, list[float]]:
    """Seconds of ``repeats`` calls of each function, called round-robin after ``warmup`` untimed rounds."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            if sync is not None:
                sync()
            t0 = time.perf_counter()
            fn()
            if sync is not None:
                sync()
            times[name].append(time.perf_counter() - t0)
    return times


def median_time(fn: Callable[[], Any], repeats: int, warmup: int = 0, sync: Callable[[], Any] | None = None) -> float:
    """Median seconds of ``repeats`` calls after ``warmup`` untimed ones."""
    return statistics.median(interleaved({"fn": fn}, repeats, warmup, sync)["fn"])


# --------------------------------------------------------------------------- tables


def table(head: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Aligned columns, two spaces apart: the first left-aligned, the others right-aligned."""
    cells = [list(map(str, head))] + [list(map(str, r)) for r in rows]
    widths = [max(len(r[i]) for r in cells if i < len(r)) for i in range(len(cells[0]))]
    lines = []
    for r in cells:
        parts = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)
