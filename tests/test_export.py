"""dmlkit.search.export: TorchScript and ONNX models give the eager embeddings to 1e-5 (GSP included)."""

import os

import pytest
import torch

from dmlkit.cli import main
from dmlkit.models import ModelConfig, build_embedder
from dmlkit.search import load_run_model
from dmlkit.search.export import export_model, export_run, run_exported
from search_helpers import tiny_search_run, write_glyph_folder

TOL = 1e-5


def need_onnx():
    """ONNX is in the test extra: skip locally without it, fail in CI (never a silent skip there)."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as err:
        if os.environ.get("CI"):
            pytest.fail(f"ONNX packages missing in CI: {err}")
        pytest.skip(f"ONNX packages not installed ({err}); pip install -e '.[test]'")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return tiny_search_run(tmp_path_factory)


def glyph_batch(tmp_path, run):
    folder, _ = write_glyph_folder(tmp_path / "glyphs", max_classes=2)
    return torch.stack([run.preprocess.load(p) for p in sorted(folder.rglob("*.png"))[:6]])


def test_torchscript_export_of_a_run_matches_eager(run_dir, tmp_path, capsys):
    run = load_run_model(run_dir)
    report = export_run(run, "torchscript", tmp_path / "model.pt")
    assert report.max_abs_diff <= TOL and report.checked_batches == (2, 5)
    images = glyph_batch(tmp_path, run)  # real images, a batch size not seen when tracing
    loaded = torch.jit.load(str(tmp_path / "model.pt"))
    with torch.no_grad():
        torch.testing.assert_close(loaded(images), run.model(images), atol=TOL, rtol=0)
    assert main(["export", str(run_dir), "--format", "torchscript", "--out", str(tmp_path / "cli.pt")]) == 0
    assert "max |exported - eager|" in capsys.readouterr().out


@pytest.mark.slow  # the torch.export-based ONNX exporter takes ~5-15 s per model
def test_onnx_export_of_a_run_matches_eager(run_dir, tmp_path):
    need_onnx()
    run = load_run_model(run_dir)
    report = export_run(run, "onnx", tmp_path / "model.onnx")
    assert report.max_abs_diff <= TOL
    images = glyph_batch(tmp_path, run)
    with torch.no_grad():
        torch.testing.assert_close(
            run_exported(tmp_path / "model.onnx", "onnx", images), run.model(images), atol=TOL, rtol=0
        )


def test_onnx_export_prints_only_its_result_not_the_exporters_known_noise(run_dir, tmp_path):
    """In a fresh process, where torch's exporter registers its operators (and says so) for the first time."""
    import subprocess
    import sys

    need_onnx()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dmlkit",
            "export",
            str(run_dir),
            "--format",
            "onnx",
            "--out",
            str(tmp_path / "model.onnx"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "onnx model ->" in done.stdout
    assert "torchvision is not installed" not in done.stderr and "LeafSpec" not in done.stderr, done.stderr


def gsp_model():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        cfg = ModelConfig(
            backbone="resnet20", pooling="gsp", pooling_params={"num_prototypes": 8, "iters": 5}, embedding_dim=16
        )
        return build_embedder(cfg, in_channels=1).eval()


def test_gsp_torchscript_matches_eager(tmp_path):
    """GSP's custom autograd Function is traced through its forward iteration (Proposition 5.2.1)."""
    model = gsp_model()
    example = torch.randn(2, 1, 32, 32, generator=torch.Generator().manual_seed(1))
    report = export_model(model, example, "torchscript", tmp_path / "gsp.pt")
    assert report.max_abs_diff <= TOL
    other = torch.randn(3, 1, 32, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(torch.jit.load(str(tmp_path / "gsp.pt"))(other), model(other), atol=TOL, rtol=0)


@pytest.mark.slow
def test_gsp_onnx_matches_eager(tmp_path):
    need_onnx()
    model = gsp_model()
    example = torch.randn(2, 1, 32, 32, generator=torch.Generator().manual_seed(1))
    report = export_model(model, example, "onnx", tmp_path / "gsp.onnx")
    assert report.max_abs_diff <= TOL


def test_bad_format_and_example_are_rejected(tmp_path):
    model = gsp_model()
    with pytest.raises(ValueError, match="unknown export format"):
        export_model(model, torch.zeros(2, 1, 32, 32), "tflite", tmp_path / "m")
    with pytest.raises(ValueError, match="B >= 2"):
        export_model(model, torch.zeros(1, 1, 32, 32), "torchscript", tmp_path / "m")


@pytest.mark.faults
def test_parity_fails_on_nan_output_instead_of_reporting_zero_difference(run_dir, tmp_path):
    run = load_run_model(run_dir)
    with torch.no_grad():
        for p in run.model.parameters():
            p.fill_(float("nan"))
    with pytest.raises(ValueError, match="NaN or Inf"):
        export_run(run, "torchscript", tmp_path / "model.pt")


@pytest.mark.faults
def test_a_checkpoint_with_nan_weights_is_refused_by_export_and_embed(run_dir, tmp_path, capsys):
    import shutil

    from dmlkit.engine.checkpoint import load_checkpoint, save_checkpoint

    broken = tmp_path / "run"
    shutil.copytree(run_dir, broken)
    state = load_checkpoint(broken / "best.pt")
    first = next(k for k, v in state["model"].items() if v.is_floating_point())
    state["model"][first][0] = float("inf")
    save_checkpoint(broken / "best.pt", {k: v for k, v in state.items() if k != "format_version"})
    assert main(["export", str(broken), "--out", str(tmp_path / "m.pt")]) == 2
    assert f"non-finite weights (NaN or Inf in {first}" in capsys.readouterr().err
    images, _ = write_glyph_folder(tmp_path / "glyphs", max_classes=2)
    assert main(["embed", str(broken), "--images", str(images), "--out", str(tmp_path / "e.npy"), "--quiet"]) != 0
    assert "non-finite weights" in capsys.readouterr().err and not (tmp_path / "e.npy").exists()


@pytest.mark.parametrize("fmt, suffix", [("torchscript", "pt"), pytest.param("onnx", "onnx", marks=pytest.mark.slow)])
def test_an_exported_file_carries_its_preprocessing_and_search_embeds_with_it(run_dir, tmp_path, fmt, suffix):
    from dmlkit.search import build_index_from_embeddings, embed_images, load_exported_model
    from dmlkit.search.exported_model import is_exported_model
    from dmlkit.search.query import search_index_folder

    if fmt == "onnx":
        need_onnx()
    run = load_run_model(run_dir)
    out = tmp_path / f"model.{suffix}"
    export_run(run, fmt, out)
    exported = load_exported_model(out)
    assert exported.preprocess == run.preprocess and exported.embedding_dim == run.embedding_dim == 16
    assert exported.metadata["run_dir"] == str(run.run_dir) and exported.metadata["format"] == "dmlkit-export/1"
    assert not is_exported_model(run_dir / "best.pt")  # a checkpoint is not an exported model
    folder, _ = write_glyph_folder(tmp_path / "glyphs", max_classes=3)
    embed_images(run, folder, tmp_path / "emb.npy", quiet=True)
    build_index_from_embeddings(tmp_path / "emb.npy", tmp_path / "index")
    query = sorted(folder.rglob("*.png"))[4]
    _, by_run = search_index_folder(tmp_path / "index", image=query, k=5)
    _, by_file = search_index_folder(tmp_path / "index", image=query, k=5, run=out)
    assert [n.id for n in by_file] == [n.id for n in by_run]
    assert [n.distance for n in by_file] == pytest.approx([n.distance for n in by_run], abs=1e-4)


def test_a_model_file_without_metadata_is_refused_with_the_fix(tmp_path):
    from dmlkit.search import load_exported_model

    export_model(gsp_model(), torch.randn(2, 1, 32, 32), "torchscript", tmp_path / "bare.pt")
    with pytest.raises(ValueError, match="is not a model file written by dmlkit export"):
        load_exported_model(tmp_path / "bare.pt")  # no dmlkit metadata: looks like any TorchScript archive
