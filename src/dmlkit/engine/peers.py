"""When a run's other process dies: the error a surviving process raises instead of the backend's.

With several processes every step waits in collectives (gradient all-reduce, gathers, barriers). When a peer
is killed (``kill -9``, out of memory, a node lost) or fails (a full disk), the survivors' next collective
fails at once with the backend's message ("Connection reset by peer" from gloo, an NCCL error), which names
neither the run nor what to do. :class:`PeerProcessLost` says both; torchrun's own report names the rank that
died and its exit code. Nothing is written after it: the checkpoints already written are whole (atomic
writes), and ``--resume`` with the same number of processes continues from ``last.pt``.
"""

from __future__ import annotations

import torch.distributed as dist

__all__ = ["PeerProcessLost", "is_peer_failure"]

_PEER_MESSAGES = (
    "Connection reset by peer",
    "Connection closed by peer",
    "Broken pipe",
    "NCCL communicator",
    "NCCL error",
    "Socket Timeout",
    "connection refused",
)


class PeerProcessLost(RuntimeError):
    """A collective with the run's other processes failed: one of them died or lost its connection."""


def is_peer_failure(err: BaseException) -> bool:
    """Whether ``err`` is a collective's failure because a peer process went away."""
    backend_error = getattr(dist, "DistBackendError", None)
    if backend_error is not None and isinstance(err, backend_error):
        return True
    text = str(err)
    return any(m.lower() in text.lower() for m in _PEER_MESSAGES)
