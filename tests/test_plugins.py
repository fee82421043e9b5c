"""Components registered from the user's own code reach the command line: a config's
``imports`` (or ``dmlkit train --import``) imports them first, and the saved config brings them back for
``evaluate`` and ``gallery`` in a fresh process, from another folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dmlkit.config import load_config
from dmlkit.plugins import normalize_imports

ROOT = Path(__file__).resolve().parents[1]

PLUGIN = '''
import torch
from pytorch_metric_learning.losses import ContrastiveLoss
from dmlkit.data import DATASETS, DMLDataset, no_categories
from dmlkit.losses import register_loss


class Blobs(DMLDataset):
    SPLITS = ("train", "test")

    def __init__(self, split, root=None, seed=0, augment=False, image_size=16, classes=8, per_class=6, max_classes=None):
        g = torch.Generator().manual_seed(0 if split == "train" else 1)
        self.labels = torch.arange(classes).repeat_interleave(per_class)
        self.class_names = [f"{split}-{c}" for c in range(classes)]
        self.class_categories = no_categories(classes)
        self.category_names = []
        self.in_channels = 1
        self.augment = augment
        patterns = torch.randn(classes, 1, image_size, image_size, generator=g)
        self.images = patterns[self.labels] + 0.3 * torch.randn(len(self.labels), 1, image_size, image_size, generator=g)

    def __getitem__(self, index):
        return self.images[index], int(self.labels[index])


DATASETS.register("blobs", Blobs)


@register_loss("toy_contrastive", builds=ContrastiveLoss)
def toy_contrastive(pos_margin: float = 0.0, neg_margin: float = 0.5, **options):
    """A contrastive loss registered by the user."""
    return ContrastiveLoss(pos_margin=pos_margin, neg_margin=neg_margin, **options)
'''


def dmlkit(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-m", "dmlkit", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def _toy_project(tmp_path: Path, max_steps: int, imports: str = "") -> Path:
    """A user's project folder: the plug-in file and a config ``toy.yaml`` training the toy dataset and loss."""
    project = tmp_path / "project"
    (project / "plugins").mkdir(parents=True)
    (project / "plugins" / "toy.py").write_text(PLUGIN)
    (project / "toy.yaml").write_text(
        f"base: {ROOT / 'configs/quickstart.yaml'}\nname: toy\n{imports}data: {{name: blobs, image_size: 16, "
        "val_fraction: 0, augment: false}\nloss: {name: toy_contrastive, miner: null}\ntrain: "
        f"{{max_steps: {max_steps}, val_every: 2, batch_size: 8, m_per_class: 2}}\nmodel: {{embedding_dim: 8}}\n"
        "eval: {clustering: false}\nplots: false\n"
    )
    return project


def test_a_plugin_file_trains_from_the_cli_and_its_run_is_used_from_another_folder(tmp_path):
    project = _toy_project(tmp_path, max_steps=2)
    refused = dmlkit("train", "toy.yaml", "--run-dir", "runs/toy", "--quiet", cwd=project)
    assert refused.returncode == 2 and "unknown" in refused.stderr and "blobs" in refused.stderr
    done = dmlkit("train", "toy.yaml", "--import", "plugins/toy.py", "--run-dir", "runs/toy", "--quiet", cwd=project)
    assert done.returncode == 0, done.stderr[-2000:]
    run = project / "runs" / "toy"
    saved = yaml.safe_load((run / "config.yaml").read_text())  # read, not loaded: loading would register the toys here
    assert saved["imports"] == [str(project / "plugins" / "toy.py")]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    evaluated = dmlkit("evaluate", str(run), cwd=elsewhere)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert json.loads(evaluated.stdout)["precision_at_1"] == pytest.approx(summary["test"]["precision_at_1"], abs=1e-6)
    assert dmlkit("gallery", str(run), cwd=elsewhere).returncode == 0


def test_bad_imports_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="no such file 'nope/toy.py'"):
        normalize_imports(["nope/toy.py"], tmp_path)
    with pytest.raises(ValueError, match="imports must be a list"):
        normalize_imports("plugins.toy")
    with pytest.raises(ValueError, match="imports: 'no_such_module_xyz' failed to import .ModuleNotFoundError"):
        load_config("configs/quickstart.yaml", ["imports=[no_such_module_xyz]"])
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('half written')\n")
    with pytest.raises(ValueError, match="failed to import .RuntimeError: half written"):
        load_config("configs/quickstart.yaml", [f"imports=[{broken}]"])


def test_an_installed_package_declares_its_components_as_entry_points(tmp_path):
    site = tmp_path / "site"
    (site / "toy_dml_parts-0.1.dist-info").mkdir(parents=True)
    (site / "toy_dml_parts-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: toy-dml-parts\nVersion: 0.1\n"
    )
    (site / "toy_dml_parts-0.1.dist-info" / "entry_points.txt").write_text("[dmlkit.plugins]\ntoy = toy_dml_parts\n")
    (site / "toy_dml_parts.py").write_text(PLUGIN)
    check = (
        "from dmlkit.config import load_config; from dmlkit.data import list_datasets; from dmlkit.losses import "
        "list_losses; load_config('configs/quickstart.yaml'); print('blobs' in list_datasets(), 'toy_contrastive' in list_losses())"
    )
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{site}"}
    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True"]


def test_a_plugin_run_stopped_mid_way_resumes_and_exports_from_another_folder(tmp_path):
    project = _toy_project(tmp_path, max_steps=4, imports="imports: [plugins/toy.py]\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "DMLKIT_FAULT": "step:3"}
    killed = subprocess.run(
        [sys.executable, "-m", "dmlkit", "train", "toy.yaml", "--run-dir", "runs/toy", "--quiet"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    run = project / "runs" / "toy"
    assert killed.returncode != 0 and (run / "last.pt").is_file() and not (run / "summary.json").exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    resumed = dmlkit("train", "--resume", str(run), "--quiet", cwd=elsewhere)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((run / "summary.json").read_text())["steps"] == 4
    refused = dmlkit("export", str(run), "--format", "torchscript", "--out", "toy.pt", cwd=elsewhere)
    assert refused.returncode == 2 and "implement the classmethod eval_preprocess" in refused.stderr
    assert not (elsewhere / "toy.pt").exists()
    with open(project / "plugins" / "toy.py", "a") as fh:  # the user states how an image file becomes an input
        fh.write(
            "\nfrom dmlkit.data.transforms.eval_preprocess import ImagePreprocess\n"
            "Blobs.eval_preprocess = classmethod(lambda cls, image_size=16, **p: "
            "ImagePreprocess(1, image_size, (0.0,), (1.0,)))\n"
        )
    exported = dmlkit("export", str(run), "--format", "torchscript", "--out", "toy.pt", cwd=elsewhere)
    assert exported.returncode == 0, exported.stderr[-2000:]
    assert (elsewhere / "toy.pt").stat().st_size > 0 and "max |exported - eager| = 0.00e+00" in exported.stdout


def test_dmlkit_plugins_names_modules_where_no_entry_point_is_installed(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "envplug.py").write_text("LOADED = True\n")
    code = "import sys; from dmlkit.config import load_config; load_config(None); print('envplug' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    loaded = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "DMLKIT_PLUGINS": "envplug"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert loaded.stdout.strip() == "True", loaded.stderr
    unset = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert unset.stdout.strip() == "False", unset.stderr
    bad = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "DMLKIT_PLUGINS": "no_such_plugin_module"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "DMLKIT_PLUGINS names the module 'no_such_plugin_module'" in bad.stderr
