"""The real timm backbones at the papers' image sizes (marked ``timm``).

For each dataset loader x backbone family that ``configs/paper`` uses, one paper config trains 2 steps with the
real timm model (``model.pretrained: false``, nothing downloaded) on a miniature of the dataset in its exact
on-disk layout with 300 x 250 JPEGs, at the config's own image size (224 or 227), evaluates, and exports to
ONNX with the parity check. And a weights file saved from a timm model is where a run starts from.

These tests need timm, whose torchvision does not install beside this project's pinned CPU torch 2.13.0 (PyPI's
torchvision needs torch's CUDA libraries). They run in a second environment, ``.venv-timm`` (torch 2.14.1 and
torchvision 0.29.1 from the machine's disk), made and run by ``make test-timm``, which ``make test`` runs after
the main suite; there ``DMLKIT_REQUIRE_TIMM=1`` makes a missing timm a failure instead of a skip.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch

import dataset_miniatures as M
from dmlkit.config import load_config

pytestmark = pytest.mark.timm
if os.environ.get("DMLKIT_REQUIRE_TIMM"):
    import timm  # noqa: F401  (a failure here, not a skip: the group must run)
else:
    timm = pytest.importorskip("timm")

PAPER = Path(__file__).resolve().parents[1] / "configs" / "paper"

# One paper config per dataset x backbone family of configs/paper (googlenet rows use timm:inception_v3).
CONFIGS = [
    "sft_t1_multi_similarity_base_cub",  # cub, inception_v3, 227
    "sft_t1_multi_similarity_base_cars",  # cars, inception_v3, 227
    "thesis_t3.1_soft_triple_l_sop",  # sop, inception_v3, 227
    "fastap_t3_resnet18_sop",  # sop, resnet18, 224
    "fastap_t3_resnet50_sop",  # sop, resnet50, 224
    "fastap_t3_googlenet_inshop",  # inshop, inception_v3, 224
    "fastap_t3_resnet18_inshop",  # inshop, resnet18, 224
    "fastap_t3_resnet50_inshop",  # inshop, resnet50, 224
    "fastap_t3_googlenet_vehicleid_small",  # vehicleid, inception_v3, 224
    "fastap_t3_resnet18_vehicleid_small",  # vehicleid, resnet18, 224
    "fastap_t3_resnet50_vehicleid_small",  # vehicleid, resnet50, 224
]


def _miniature(name: str, root: Path) -> Path:
    with M.jpeg_size(300, 250):
        if name == "cub":
            return M.write_cub(root, num_classes=12, per_class=3)
        if name == "cars":
            return M.write_cars(root, num_classes=12, per_class=3)
        if name == "sop":
            return M.write_sop(root, train_classes=16, test_classes=4, per_class=2)
        if name == "inshop":
            return M.write_inshop(root, train_items=12, test_items=4)
        if name == "vehicleid":
            return M.write_vehicleid(root, per_list=12, per_vehicle=2)
    raise AssertionError(name)


def _overrides(base, root: Path, tmp_path: Path) -> list[str]:
    sets = [
        f"data.root={root}",
        "data.num_workers=0",
        "model.pretrained=false",
        "train.batch_size=12",
        "train.max_steps=2",
        "train.val_every=2",
        "train.accelerator=cpu",
        f"output_dir={tmp_path}",
        "eval.batch_size=16",
        "eval.clustering=false",
        "plots=false",
    ]
    if base.loss.name == "xbm":
        sets += ["loss.params.memory_size=16", "loss.params.start_iteration=1"]
    if base.train.sampler == "fastap_hard":
        sets += ["train.sampler_params.small_categories=replace"]
    return sets


@pytest.mark.slow
@pytest.mark.parametrize("name", CONFIGS)
def test_paper_config_trains_evaluates_and_exports_with_the_real_timm_model(name, tmp_path):
    from dmlkit.assemble import build_trainer
    from dmlkit.search.export import export_run

    base = load_config(PAPER / f"{name}.yaml")
    cfg = load_config(PAPER / f"{name}.yaml", _overrides(base, _miniature(base.data.name, tmp_path / "data"), tmp_path))
    assert cfg.data.image_size == base.data.image_size in (224, 227)
    trainer = build_trainer(cfg, tmp_path / "run", quiet=True)
    arch = cfg.model.backbone.removeprefix("timm:")
    reference = timm.create_model(arch, pretrained=False, num_classes=0, global_pool="")
    assert type(trainer.parts.model.backbone.model) is type(reference)  # the real architecture, not a stand-in
    summary = trainer.fit()
    assert summary["steps"] == 2
    test = summary["test"]  # an untrained model on a few test images: any value, but every metric present
    assert all(
        math.isfinite(test[k]) and 0.0 <= test[k] <= 1.0 for k in ("precision_at_1", "mean_average_precision_at_r")
    )
    report = export_run(tmp_path / "run", "onnx", tmp_path / "model.onnx")
    assert report.path.exists() and report.max_abs_diff <= 1e-4


def _saved_weights(arch: str, path: Path, seed: int = 7) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    state = timm.create_model(arch, pretrained=False).state_dict()  # with its ImageNet classifier
    torch.save(state, path)
    return state


def test_a_run_starts_from_a_weights_file_saved_from_timm(tmp_path):
    from dmlkit.assemble import build_run

    saved = _saved_weights("resnet18", tmp_path / "resnet18.pth")
    root = _miniature("sop", tmp_path / "data")
    base = load_config(PAPER / "fastap_t3_resnet18_sop.yaml")
    cfg = load_config(
        PAPER / "fastap_t3_resnet18_sop.yaml",
        [*_overrides(base, root, tmp_path), f"model.pretrained={tmp_path / 'resnet18.pth'}"],
    )
    backbone = build_run(cfg).model.backbone.model.state_dict()
    dropped = set(saved) - set(backbone)
    assert dropped == {"fc.weight", "fc.bias"}  # the classifier only
    assert all(torch.equal(backbone[k], saved[k]) for k in backbone)
    # and not timm's random initialisation: another seed's weights differ
    assert not torch.equal(backbone["conv1.weight"], timm.create_model("resnet18").state_dict()["conv1.weight"])


@pytest.mark.parametrize("damage", ["missing", "unexpected", "other_architecture"])
def test_a_weights_file_that_does_not_fit_is_an_error_naming_the_keys(tmp_path, damage):
    from dmlkit.models import create_backbone

    state = _saved_weights("resnet18", tmp_path / "w.pth")
    if damage == "missing":
        del state["layer1.0.conv1.weight"]
        key = "layer1.0.conv1.weight"
    elif damage == "unexpected":
        state["layer9.extra.weight"] = torch.zeros(3)
        key = "layer9.extra.weight"
    else:
        state = timm.create_model("resnet34", pretrained=False).state_dict()
        key = "layer1.2"
    torch.save(state, tmp_path / "w.pth")
    with pytest.raises(ValueError, match="do not fit timm model 'resnet18'") as err:
        create_backbone("timm:resnet18", pretrained=tmp_path / "w.pth")
    assert key in str(err.value)
