"""Per-seed paired differences between the variants of a study and its baseline variant (GAP in the GSP studies).

The studies' runs are dicts with ``variant``, ``seed`` and metric keys; runs of one seed share the data,
the initial weights and the batches, so ``variant - baseline`` on the same seed is the comparison.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["paired_differences"]


def paired_differences(
    results: Sequence[dict[str, Any]],
    baseline: str = "gap",
    keys: Sequence[str] = ("test_map_at_r", "test_precision_at_1"),
) -> list[dict[str, Any]]:
    """Per variant and seed, ``variant - baseline`` of ``keys`` on the same seed (runs without a baseline run of their
    seed are left out)."""
    base = {r["seed"]: r for r in results if r["variant"] == baseline}
    return [
        {"variant": r["variant"], "seed": r["seed"], **{k: r[k] - base[r["seed"]][k] for k in keys}}
        for r in results
        if r["variant"] != baseline and r["seed"] in base
    ]
