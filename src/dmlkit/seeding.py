"""Derive independent seeds from tuples of integers, without touching global RNG state.

Every random choice in ``dmlkit.data`` comes from a ``torch.Generator`` seeded
with ``derive_seed(seed, epoch[, index])``, so a sampler's batches depend only
on (seed, epoch) and an augmented image only on (seed, epoch, index), whatever
the number of data-loader workers or the order in which items are fetched.
Models (a backbone's initialisation) and methods (the zero-shot loss' class halves) seed
the same way.

A low-level module of its own, importing only torch and ``dmlkit.validation``, so that
``dmlkit.models`` and ``dmlkit.methods`` can seed without loading ``dmlkit.data`` and its
datasets; ``dmlkit.data.seeding`` is the same functions under the data package's name.
"""

from __future__ import annotations

import torch

from dmlkit.validation import is_int

__all__ = ["check_seed", "derive_seed", "make_generator"]

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    """One step of the SplitMix64 finaliser (Steele et al., 2014): a bijective 64-bit mixer."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def derive_seed(*values: int) -> int:
    """A 63-bit seed that depends on every value and their order, e.g. ``derive_seed(seed, epoch, index)``."""
    h = 0x6A09E667F3BCC908
    for v in values:
        h = _splitmix64(h ^ (int(v) & _MASK64))
    return h >> 1  # torch.Generator.manual_seed accepts any int; keep it non-negative and < 2**63


def make_generator(*values: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with ``derive_seed(*values)``."""
    g = torch.Generator()
    g.manual_seed(derive_seed(*values))
    return g


def check_seed(seed: object, what: str = "seed") -> None:
    """Raise ``ValueError`` unless ``seed`` is a plain int (``bool`` is refused)."""
    if not is_int(seed):
        raise ValueError(f"{what} must be an int, got {seed!r}")
