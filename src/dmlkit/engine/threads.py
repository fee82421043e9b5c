"""The intra-op thread count of a run (``train.threads``), pinned before anything is computed.

PyTorch splits a float reduction (a convolution's weight gradient, a matrix product, a sum) over its
intra-op threads, and the order of the partial sums follows the split. The same config trained with 1
and with 2 threads therefore ends on different weights; over a 1,500-step pretraining the two backbones
differed by 3 MAP@R points (docs/results/testbed.md). A run whose results must reproduce on any machine
of a kind sets ``train.threads``: the trainer pins it whatever the shell's ``OMP_NUM_THREADS`` or a
protocol's ``--jobs``, and ``environment.json`` records it. ``null`` keeps the process's count (one
thread per core, or ``OMP_NUM_THREADS``), the fastest choice when bits across machines do not matter.
"""

from __future__ import annotations

import torch

__all__ = ["pin_threads"]


def pin_threads(threads: int | None) -> int:
    """Set the intra-op thread count to ``threads`` (unless None); return the count in force."""
    if threads is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()
