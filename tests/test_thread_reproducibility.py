"""Pretraining and fine-tuning give the same weights bit for bit from shells with 1 and with 2 threads,
and the CPU's kernels are keyed apart because they do not.

A short pretraining recipe is trained in fresh processes whose ``OMP_NUM_THREADS`` differ. With
``train.threads`` pinned (what every shipped recipe and testbed config does) the backbones are identical;
the control, the same recipe with ``train.threads: null``, shows whether the shell's thread count changes the
weights on this CPU (it does on some machines; on an AMD Zen 3 with AVX2 kernels it does not, and the
control is skipped with that reason), so the pinned comparison is not read as proof where it shows nothing. A process whose ATen kernels are forced to
another instruction set (``ATEN_CPU_CAPABILITY=default``, what an older CPU runs) ends on other weights, records
that instruction set, and caches them under another file name than this machine's kernels.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

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
print(json.dumps({"checksum": entry["checksum"], "threads": entry["threads"], "cpu": entry["cpu_capability"],
                  "file": P.pretrained_path("tiny-threads").name}))
"""


def pretrain_in_shell(shell_threads: int, recipe_threads: int | None, cache: Path, **extra_env: str) -> dict:
    inherited = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}  # the machine's own kernels
    env = {**inherited, "OMP_NUM_THREADS": str(shell_threads), "DMLKIT_CACHE": str(cache), **extra_env}
    done = subprocess.run(
        [sys.executable, "-c", PRETRAIN_SCRIPT, GLYPH_ROOT, json.dumps(recipe_threads)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 cores to run a 2-thread shell")
def test_a_pinned_recipe_gives_the_same_backbone_from_1_and_2_thread_shells(tmp_path):
    one = pretrain_in_shell(1, 2, tmp_path / "a")
    two = pretrain_in_shell(2, 2, tmp_path / "b")
    assert one == two and one["threads"] == 2


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 cores to run a 2-thread shell")
def test_control_an_unpinned_recipe_follows_the_shell(tmp_path):
    one = pretrain_in_shell(1, None, tmp_path / "a")
    two = pretrain_in_shell(2, None, tmp_path / "b")
    if one["checksum"] == two["checksum"]:
        # Measured 2026-11-28 on an AMD Zen 3 (AVX2) machine: 1 and 2 threads give the same weights, this recipe's and
        # the brief recipe's at 20 steps; the machines where the thread count mattered (docs/results/testbed.md) ran
        # other kernels. The pinned test is then true on this CPU whatever the pinning does, and says so here.
        pytest.skip(
            f"on this CPU ({one['cpu']} kernels) 1 and 2 intra-op threads give the same weights: the pinned "
            "test above shows nothing here (where they differ, this control passes)"
        )


@pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() == "DEFAULT", reason="this CPU runs the default kernels already"
)
def test_other_cpu_kernels_give_another_backbone_under_another_file_name(tmp_path):
    native = pretrain_in_shell(1, 1, tmp_path / "a")
    default = pretrain_in_shell(1, 1, tmp_path / "b", ATEN_CPU_CAPABILITY="default")
    assert native["cpu"] == torch.backends.cpu.get_cpu_capability() and default["cpu"] == "DEFAULT"
    assert native["checksum"] != default["checksum"], (
        "the default kernels gave this machine's weights: the CPU kind no longer shows in this recipe; make it larger"
    )
    assert native["file"] != default["file"]
