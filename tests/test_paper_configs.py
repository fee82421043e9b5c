"""The paper-table configs of ``configs/paper/``: every one loads; a sample trains a few steps on miniature data.

The smoke runs swap the ImageNet backbone for the CIFAR ResNet-20 (timm is an
optional extra and no weights are downloaded in tests), shrink images, batches,
memories and proxies to the miniature trees of ``dataset_miniatures``, and keep
every other setting of the config (loss, miner, sampler, augmentation, CCP,
schedule, optimiser).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import dataset_miniatures as M
from dmlkit.config import load_config
from dmlkit.data import list_datasets
from dmlkit.losses import list_losses

PAPER = Path(__file__).resolve().parents[1] / "configs" / "paper"
CONFIGS = sorted(PAPER.glob("*.yaml"))


def test_there_is_a_config_per_table_row():
    names = {p.stem for p in CONFIGS}
    assert len([n for n in names if n.startswith("thesis_t3.1_")]) == 13 * 4
    assert len([n for n in names if n.startswith("thesis_t5.1_")]) == 15 * 4
    assert len([n for n in names if n.startswith("sft_t1_")]) == 12 * 2
    assert len([n for n in names if n.startswith("sft_t3_")]) == 9
    assert len([n for n in names if n.startswith("fastap_t3_")]) == 3 * 5


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_config_loads_and_states_what_to_expect(path):
    cfg = load_config(path)
    assert cfg.name == path.stem
    assert cfg.data.name in list_datasets() and cfg.loss.name in list_losses()
    assert cfg.model.backbone.startswith("timm:") and cfg.model.pretrained is True
    assert cfg.expected["protocol"] in ("fair", "conventional") and cfg.expected["source"]
    values = [v for k, block in cfg.expected.items() if isinstance(block, dict) for v in block.values()]
    assert values and all(0 < v <= 100 for v in values)  # published percentages


def _miniature(name: str, tmp_path: Path) -> Path:
    root = tmp_path / name
    if name == "cub":
        return M.write_cub(root, num_classes=32, per_class=4)
    if name == "cars":
        return M.write_cars(root, num_classes=32, per_class=4)
    if name == "sop":
        return M.write_sop(root, train_classes=24, test_classes=12, per_class=2)
    if name == "inshop":
        return M.write_inshop(root, train_items=24, test_items=6)
    if name == "vehicleid":
        return M.write_vehicleid(root, per_list=24, per_vehicle=2)
    raise AssertionError(name)


SMOKE = [  # one per kind of loss / method, every dataset
    "thesis_t3.1_c1_cub",
    "thesis_t3.1_c2_xbm_l_cars",
    "thesis_t3.1_ms_ccp_l_cub",
    "thesis_t3.1_proxy_anchor_cub",
    "thesis_t3.1_proxy_nca_pp_cars",
    "thesis_t3.1_soft_triple_l_sop",
    "sft_t1_triplet_sft_cub",
    "fastap_t3_resnet18_sop",
    "fastap_t3_resnet50_inshop",
    "fastap_t3_googlenet_vehicleid_small",
    "thesis_t5.1_ms_gsp_cub",
]


@pytest.mark.parametrize("name", SMOKE)
def test_configs_train_a_few_steps_on_miniatures(name, tmp_path):
    from dmlkit.assemble import build_trainer

    base = load_config(PAPER / f"{name}.yaml")
    overrides = [
        f"data.root={_miniature(base.data.name, tmp_path)}",
        "data.image_size=32",
        "data.num_workers=0",
        "model.backbone=resnet20",
        "model.pretrained=false",
        "model.embedding_dim=16",
        "train.batch_size=12",
        "train.max_steps=2",
        "train.val_every=2",
        "train.accelerator=cpu",
        "output_dir=" + str(tmp_path),
        "eval.batch_size=64",
        "plots=false",
    ]
    if base.loss.name == "xbm":
        overrides += ["loss.params.memory_size=24", "loss.params.start_iteration=1"]
    if base.methods.warmup.steps:
        overrides += ["methods.warmup.steps=1"]  # the switch from head-only to full training happens in the run
    if base.methods.ccp.enabled:
        overrides += ["methods.ccp.proxies_per_class=2", "methods.ccp.pool_size=3"]
    if base.model.local_dim is not None:
        overrides += ["model.local_dim=16"]  # the pooled local embedding is the 16-d embedding (model.head: none)
    if base.train.sampler == "fastap_hard" and base.data.name != "vehicleid":
        overrides += ["train.sampler_params.small_categories=replace"]
    cfg = load_config(PAPER / f"{name}.yaml", overrides)
    summary = build_trainer(cfg, tmp_path / "run", quiet=True).fit()
    assert summary["steps"] == 2


def test_paper_specific_settings_are_kept():
    assert load_config(PAPER / "thesis_t5.1_panchor_sop.yaml").train.lr == 5.0e-6  # Sec. 5.3.4.1, SOP only
    assert load_config(PAPER / "thesis_t5.1_panchor_cub.yaml").train.lr == 1.0e-5
    gsp = load_config(PAPER / "thesis_t5.1_pnca_gsp_inshop.yaml")
    assert gsp.model.pooling == "gsp" and gsp.model.pooling_params["eps"] == 0.5 and gsp.methods.zero_shot.weight == 0.1
    assert load_config(PAPER / "thesis_t5.1_c2_gsp_inshop.yaml").model.pooling_params["eps"] == 5.0
    c2 = load_config(PAPER / "thesis_t3.1_c2_cars.yaml").loss.params
    assert (c2["pos_margin"], c2["neg_margin"]) == (0.2652, 0.5409)
    sft = load_config(PAPER / "sft_t1_npair_sft_cub.yaml")
    assert (sft.methods.sft.name, sft.methods.sft.lam, sft.train.batch_size, sft.train.m_per_class) == (
        "sft",
        0.2,
        60,
        3,
    )
