"""Shared test set-up: a persistent glyph cache inside the checkout (rendered once per machine)."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("DMLKIT_CACHE", str(ROOT / ".cache" / "dmlkit"))
os.chdir(ROOT)
