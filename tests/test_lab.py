"""The lab reaches the library only through its plug-in: its names resolve wherever they are looked up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_a_lab_dataset_resolves_without_a_config_and_glyphs_alone_loads_no_lab_module():
    code = (
        "import sys; from dmlkit.data.catalog import DATASETS; DATASETS.get('glyphs'); "
        "print(any(m.startswith('dmlkit_lab') for m in sys.modules)); "
        "print(DATASETS.get('font_glyphs').__module__)"
    )
    assert fresh(code).split() == ["False", "dmlkit_lab.datasets.font_glyphs"]


def test_a_lab_recipe_resolves_without_a_config():
    code = "from dmlkit.assemble.pretrained import is_pretrained_name, list_pretrained; print(is_pretrained_name('glyphs-resnet20-brief@seed1'), *list_pretrained())"
    assert fresh(code).split() == ["True", "glyphs-resnet20", "glyphs-resnet20-brief"]


def test_the_lab_commands_are_listed_in_their_places():
    from dmlkit.cli import all_commands

    names = list(all_commands())
    assert names[names.index("report") + 1] == "geometry" and names[-1] == "study"


def test_a_recipe_is_registered_once_and_checked():
    from dmlkit.assemble.pretrained import register_pretrained_recipe
    from dmlkit_lab.recipes import LAB_RECIPES

    with pytest.raises(ValueError, match="registered twice"):
        register_pretrained_recipe("glyphs-resnet20", LAB_RECIPES["glyphs-resnet20"])
    with pytest.raises(ValueError, match="without '@'"):
        register_pretrained_recipe("a@b", {})
