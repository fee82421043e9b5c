"""How the exact k-NN search runs its tiles concurrently.

* :class:`Workers`: ``n`` threads, each running torch single-threaded on one
  whole task (a score tile, a strip, a chunk of re-ranked queries). Coarse
  tasks keep the search fast when other processes compete for the cores,
  where many small multi-threaded ops stall on their synchronisation.
* :class:`TileBuffers`: one reusable float32 tile buffer per thread, so a
  worker allocates its tile once.
* :func:`round_robin_pairs`: the block pairs of a symmetric (self-)search in
  rounds whose pairs share no block, so the tiles of one round write disjoint
  rows of the top-k table and can run at the same time without locks.

This module is a part of :func:`dmlkit.evaluation.knn_search`, not an API of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch


class Workers:
    """Runs batches of independent tasks on ``n`` threads, each running torch
    single-threaded (``torch.set_num_threads`` is thread-local, so the caller's
    setting is untouched). With ``n == 1`` tasks run in the calling thread.

    Coarse tasks (whole tiles) instead of many small multi-threaded ops keep the
    search fast when other processes compete for the cores: an OpenMP barrier
    per small op stalls whenever one core is taken, a whole tile does not.
    """

    def __init__(self, n: int) -> None:
        self.n = max(1, n)
        self._pool: ThreadPoolExecutor | None = None

    def __enter__(self) -> "Workers":
        if self.n > 1:
            self._pool = ThreadPoolExecutor(self.n, initializer=torch.set_num_threads, initargs=(1,))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def run(self, fn: Callable[..., None], items: Sequence[object]) -> None:
        """``fn(item)`` for every item (concurrently); waits and re-raises."""
        if self._pool is None or len(items) <= 1:
            for item in items:
                fn(item)
            return

        def task(item: object) -> None:
            with torch.no_grad():
                fn(item)

        futures = [self._pool.submit(task, item) for item in items]
        for f in futures:
            f.result()


class TileBuffers(threading.local):
    """One reusable float32 tile buffer per thread."""

    def get(self, rows: int, cols: int) -> torch.Tensor:
        """A ``(rows, cols)`` float32 view of this thread's buffer (grown when too small)."""
        buf = getattr(self, "buf", None)
        if buf is None or buf.numel() < rows * cols:
            buf = self.buf = torch.empty(rows * cols, dtype=torch.float32)
        return buf[: rows * cols].view(rows, cols)


def round_robin_pairs(n: int) -> list[list[tuple[int, int]]]:
    """All pairs ``a < b`` of ``range(n)`` in rounds of disjoint pairs (circle method)."""
    ids: list[int] = list(range(n)) + ([-1] if n % 2 else [])
    m = len(ids)
    rounds = []
    for _ in range(m - 1):
        pairs = [(ids[i], ids[m - 1 - i]) for i in range(m // 2)]
        rounds.append([(min(p), max(p)) for p in pairs if -1 not in p])
        ids = [ids[0], ids[-1], *ids[1:-1]]
    return [r for r in rounds if r]
