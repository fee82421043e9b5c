"""A training method with a setting, registered from a plug-in file, is configured and run like a built-in one.

The toy method adds one objective term whose value is its setting ``methods.toy.weight``: the term's logged loss
shows that the hook ran and that the value given on the command line reached it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dmlkit.config import config_differences, dump_config, load_config
from dmlkit.method_settings import METHOD_SETTINGS
from dmlkit.methods import METHODS

ROOT = Path(__file__).resolve().parents[1]

PLUGIN = """
from dataclasses import dataclass

from dmlkit.engine.objective import ObjectiveTerm
from dmlkit.methods import Method, register_method


@dataclass
class ToyConfig:
    weight: float = 0.0

    @property
    def active(self) -> bool:
        return self.weight > 0

    def __post_init__(self) -> None:
        if self.weight < 0:
            raise ValueError(f"methods.toy.weight must be >= 0, got {self.weight!r}")


class ConstantTerm(ObjectiveTerm):
    def value(self, embeddings, labels, batch):
        return embeddings.new_tensor(1.0)


@register_method("toy", settings=ToyConfig)
class Toy(Method):
    name = "toy"

    def __init__(self, weight: float) -> None:
        self.weight = weight

    @classmethod
    def from_config(cls, cfg):
        return cls(cfg.methods.toy.weight) if cfg.methods.toy.active else None

    def terms(self, terms):
        return [*terms, ConstantTerm("toy", weight=self.weight)]
"""


@pytest.fixture
def toy_plugin(tmp_path):
    path = tmp_path / "toy_method.py"
    path.write_text(PLUGIN)
    yield path
    for registry in (METHODS, METHOD_SETTINGS):
        if "toy" in registry:
            registry.unregister("toy")


def test_a_plugin_method_has_a_typed_config_section(toy_plugin):
    with pytest.raises(
        ValueError, match=r"unknown config key\(s\) \['toy'\] in section 'methods'; valid keys are: sft, ccp"
    ):
        load_config("configs/quickstart.yaml", ["methods.toy.weight=0.5"])
    imports = [f"imports=[{toy_plugin}]"]
    cfg = load_config("configs/quickstart.yaml", imports + ["methods.toy.weight=0.5"])
    assert cfg.methods.toy.weight == 0.5 and cfg.methods.enabled_sections() == ["toy"]
    assert list(yaml.safe_load(dump_config(cfg))["methods"]) == ["sft", "ccp", "zero_shot", "warmup", "toy"]
    off = load_config("configs/quickstart.yaml", imports + ["methods.toy.weight=0"])
    assert config_differences(off, cfg) == ["methods.toy.weight"]
    assert config_differences(off, load_config("configs/quickstart.yaml", imports)) == []
    with pytest.raises(ValueError, match="config key 'methods.toy.weight' expects float"):
        load_config("configs/quickstart.yaml", imports + ["methods.toy.weight=many"])
    with pytest.raises(ValueError, match="methods.toy.weight must be >= 0"):
        load_config("configs/quickstart.yaml", imports + ["methods.toy.weight=-1"])
    with pytest.raises(
        ValueError, match=r"unknown config key\(s\) \['size'\] in section 'methods.toy'; valid keys are: weight"
    ):
        load_config("configs/quickstart.yaml", imports + ["methods.toy.size=1"])


@pytest.mark.slow
def test_a_plugin_method_trains_from_the_command_line(tmp_path):
    from tests_helpers import TINY_OVERRIDES

    (tmp_path / "toy_method.py").write_text(PLUGIN)
    overrides = TINY_OVERRIDES + [
        "plots=false",
        "eval.clustering=false",
        "train.max_steps=2",
        "train.val_every=2",
        "train.log_every=1",
        "methods.toy.weight=0.25",
    ]
    sets = [a for o in overrides for a in ("--set", o)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    run = tmp_path / "run"

    def dmlkit(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "dmlkit", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    done = dmlkit(
        "train",
        "configs/quickstart.yaml",
        *sets,
        "--import",
        str(tmp_path / "toy_method.py"),
        "--run-dir",
        str(run),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    train = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in train if r["split"] == "train"]
    assert len(train) == 2 and all(r["loss/toy"] == pytest.approx(0.25) for r in train)
    assert all(r["loss"] == pytest.approx(r["loss/metric"] + 0.25, rel=1e-6) for r in train)
    assert yaml.safe_load((run / "config.yaml").read_text())["methods"]["toy"] == {"weight": 0.25}
    evaluated = dmlkit("evaluate", str(run))  # the saved config imports the plug-in again
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
