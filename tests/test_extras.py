"""The core install: the components import and run without the packages of the extras (lightning, faiss,
matplotlib, rich), and what needs one of them names its extra and the pip command (``dmlkit.extras``).

Each check runs in a fresh interpreter whose import system refuses those four packages, as an install without
the extras would."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dmlkit.extras import MissingExtra, installed, require, require_all

REPO = Path(__file__).resolve().parents[1]
BLOCKED = ("lightning", "faiss", "matplotlib", "rich")

BLOCKER = f"""
import sys

BLOCKED = {BLOCKED!r}


class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
"""


def _without_extras(code: str, timeout: float = 240) -> subprocess.CompletedProcess:
    script = BLOCKER + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=timeout)


def test_components_run_without_the_extras():
    result = _without_extras("""
        import torch

        import dmlkit.augment, dmlkit.data, dmlkit.models, dmlkit.proxies  # noqa: F401
        from dmlkit.data import list_batch_samplers, list_datasets
        from dmlkit.evaluation import retrieval_metrics
        from dmlkit.losses import create_loss
        from dmlkit.pooling import create_pooling

        g = torch.Generator().manual_seed(0)
        embeddings = torch.nn.functional.normalize(torch.randn(32, 8, generator=g), dim=1)
        labels = torch.arange(8).repeat_interleave(4)
        loss = create_loss("multi_similarity")(embeddings, labels)
        pooled = create_pooling("gem", 8)(torch.rand(2, 8, 4, 4, generator=g))
        metrics = retrieval_metrics(embeddings, labels)
        assert torch.isfinite(loss) and loss > 0, loss
        assert pooled.shape == (2, 8), pooled.shape
        assert 0 <= metrics["precision_at_1"] <= 1 and 0 <= metrics["mean_average_precision_at_r"] <= 1, metrics
        assert list_batch_samplers() and "image_folder" in list_datasets()  # plug-ins loaded: none needs an extra
        from dmlkit.cli import main

        try:
            main(["--help"])  # the command line answers; its commands say what they need
        except SystemExit as done:
            assert done.code == 0, done.code
        loaded = sorted({m.split(".")[0] for m in sys.modules} & set(BLOCKED))
        assert not loaded, loaded
        print("components ok")
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "components ok" in result.stdout


def test_clustering_metrics_name_the_faiss_extra():
    result = _without_extras("""
        import torch
        from dmlkit.evaluation import clustering_metrics, nmi

        assert nmi([0, 0, 1], [1, 1, 0]) == 1.0  # the scores themselves need no extra
        try:
            clustering_metrics(torch.randn(12, 4), torch.arange(3).repeat(4))
        except ImportError as err:
            print(err)
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "needs the 'faiss' extra: pip install 'dmlkit[faiss]'" in result.stdout


def _photos(root: Path, classes: int = 10, per_class: int = 4) -> Path:
    from PIL import Image

    for c in range(classes):
        (root / f"class{c:02d}").mkdir(parents=True)
        for i in range(per_class):
            Image.new("RGB", (16, 16), (20 * c, 10 * i, 128)).save(root / f"class{c:02d}" / f"{i}.png")
    return root


@pytest.mark.parametrize(
    "optional, expected",
    [
        (
            ["plots=false", "eval.clustering=false"],
            "dmlkit training needs the 'train' extra: pip install 'dmlkit[train]'",
        ),
        ([], "dmlkit training needs the extras 'train', 'faiss', 'plots': pip install 'dmlkit[train,faiss,plots]'"),
    ],
)
def test_training_without_lightning_names_the_extra(tmp_path, optional, expected):
    # with every default the check comes before the data are read: a folder that does not exist is not reached
    photos = _photos(tmp_path / "photos") if optional else tmp_path / "no_photos"
    args = ["train", "configs/own_images.yaml", "--run-dir", str(tmp_path / "run"), "--quiet"]
    for override in [f"data.root={photos}", "data.image_size=16", "train.batch_size=8", "train.max_steps=2", *optional]:
        args += ["--set", override]
    result = _without_extras(f"""
        from dmlkit.cli import main

        sys.exit(main({args!r}))
    """)
    assert result.returncode == 2, result.stderr[-3000:]
    assert expected in result.stderr, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "last.pt").exists()


def test_require_names_the_extra_and_passes_other_import_errors_on(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "dmlkit_absent_pkg", None)  # as an uninstalled package
    with pytest.raises(
        MissingExtra, match=r"dmlkit thing needs the 'plots' extra: pip install 'dmlkit\[plots\]'"
    ) as info:
        require("dmlkit_absent_pkg.sub", "plots", "dmlkit thing")
    assert isinstance(info.value, ImportError) and isinstance(info.value, ValueError)  # the CLI's one-line error
    (tmp_path / "dmlkit_broken_pkg").mkdir()
    (tmp_path / "dmlkit_broken_pkg" / "__init__.py").write_text("import dmlkit_absent_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as broken:  # installed but broken: the real error, not "install the extra"
        require("dmlkit_broken_pkg", "plots", "dmlkit thing")
    assert not isinstance(broken.value, MissingExtra)
    assert not installed("dmlkit_absent_pkg") and installed("torch")
    require_all([("torch", "train", "tensors")], "dmlkit thing")
    with pytest.raises(MissingExtra, match=r"the extras 'faiss', 'plots': pip install 'dmlkit\[faiss,plots\]'"):
        require_all(
            [("dmlkit_absent_pkg", "faiss", "k-means"), ("dmlkit_absent_pkg", "plots", "plots")], "dmlkit thing"
        )
