"""Pretraining and fine-tuning give the same weights bit for bit from shells with 1 and with 2 threads (issue 29).

A short pretraining recipe is trained in fresh processes whose ``OMP_NUM_THREADS`` differ. With
``train.threads`` pinned (what every shipped recipe and testbed config does) the backbones are identical;
the control, the same recipe with ``train.threads: null``, shows the shell's thread count does change the
weights, so the pinned comparison is not equal by accident.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GLYPH_ROOT = str(Path(os.environ["DMLKIT_CACHE"]) / "glyphs")

# Registers a small recipe (8 steps of 16 classes x 2 images on 24 pretraining classes), builds it, prints the checksum
# of the cached backbone and the thread count the run recorded.
PRETRAIN_SCRIPT = """
import copy, json, sys
from dmlkit.assemble import pretrained as P
from dmlkit.pretrain import ensure_pretrained
recipe = copy.deepcopy(P.RECIPES["glyphs-resnet20"])
recipe["data"].update(root=sys.argv[1], max_classes=24, val_fraction=0.25)
recipe["model"]["embedding_dim"] = 16
recipe["train"].update(max_steps=8, batch_size=32, m_per_class=2, val_every=8, log_every=4, threads=json.loads(sys.argv[2]))
P.RECIPES["tiny-threads"] = recipe
entry = P.read_pretrained("tiny-threads", ensure_pretrained("tiny-threads", quiet=True))
print(json.dumps({"checksum": entry["checksum"], "threads": entry["threads"]}))
"""


def pretrain_in_shell(shell_threads: int, recipe_threads: int | None, cache: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(shell_threads), "DMLKIT_CACHE": str(cache)}
    done = subprocess.run([sys.executable, "-c", PRETRAIN_SCRIPT, GLYPH_ROOT, json.dumps(recipe_threads)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 cores to run a 2-thread shell")
def test_a_pinned_recipe_gives_the_same_backbone_from_1_and_2_thread_shells(tmp_path):
    one = pretrain_in_shell(1, 2, tmp_path / "a")
    two = pretrain_in_shell(2, 2, tmp_path / "b")
    assert one == two == {"checksum": one["checksum"], "threads": 2}


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 cores to run a 2-thread shell")
def test_control_an_unpinned_recipe_follows_the_shell(tmp_path):
    one = pretrain_in_shell(1, None, tmp_path / "a")
    two = pretrain_in_shell(2, None, tmp_path / "b")
    assert one["checksum"] != two["checksum"], (
        "1 and 2 intra-op threads gave identical weights: the pinned test above no longer shows anything; "
        "make its recipe larger (more images per step) until the thread count matters again"
    )
