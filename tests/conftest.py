"""Shared test set-up: a persistent glyph cache inside the checkout (rendered once per machine)."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("DMLKIT_CACHE", str(ROOT / ".cache" / "dmlkit"))
os.chdir(ROOT)

# Property tests draw their examples from a fixed seed, so a run of the suite (local or CI) is repeatable;
# set DMLKIT_HYPOTHESIS_RANDOM=1 to search new examples.
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("dmlkit", derandomize=not os.environ.get("DMLKIT_HYPOTHESIS_RANDOM"))
_hypothesis_settings.load_profile("dmlkit")


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` need a CUDA device (``scripts/device_check.sh`` runs them on a lent GPU)."""
    import pytest
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
