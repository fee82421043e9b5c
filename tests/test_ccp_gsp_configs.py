"""CCP + GSP + the zero-shot loss (thesis Table 5.1, row C1+CCP+GSP) starts: its four paper configs build.

These configs put CCP's proxies and projection term, GSP and the zero-shot term into one objective, so
they start only when every method plugs into the run. The configs are built on miniatures of their
datasets (ResNet-20 in place of the ImageNet backbone, small proxies), without training.
"""

from pathlib import Path

import pytest

import dataset_miniatures as M
from dmlkit.assemble import build_run
from dmlkit.config import load_config
from dmlkit.methods.ccp import ProjectionStopping, ProjectionTerm
from dmlkit.methods.zero_shot import ZeroShotTerm
from dmlkit.proxies import ProxyPairLoss

PAPER = Path(__file__).resolve().parents[1] / "configs" / "paper"
MINIATURES = {
    "cub": lambda root: M.write_cub(root, num_classes=32, per_class=4),
    "cars": lambda root: M.write_cars(root, num_classes=32, per_class=4),
    "sop": lambda root: M.write_sop(root, train_classes=24, test_classes=12, per_class=2),
    "inshop": lambda root: M.write_inshop(root, train_items=24, test_items=6),
}


@pytest.mark.parametrize("dataset", sorted(MINIATURES))
def test_ccp_gsp_zero_shot_config_builds_with_every_term(dataset, tmp_path):
    path = PAPER / f"thesis_t5.1_c1_ccp_gsp_{dataset}.yaml"
    overrides = [
        f"data.root={MINIATURES[dataset](tmp_path / dataset)}",
        "data.image_size=32",
        "data.num_workers=0",
        "model.backbone=resnet20",
        "model.pretrained=false",
        "model.embedding_dim=16",
        "train.batch_size=12",
        "methods.ccp.proxies_per_class=2",
        "methods.ccp.pool_size=3",
    ]
    if load_config(path).model.local_dim is not None:
        overrides += ["model.local_dim=16"]  # the pooled local embedding is the 16-d embedding (model.head: none)
    cfg = load_config(path, overrides)
    parts = build_run(cfg)
    terms = {t.name: t for t in parts.objective.terms}
    assert list(terms) == ["metric", "batch", "projection", "zero_shot"]
    assert isinstance(terms["metric"].loss, ProxyPairLoss) and isinstance(terms["projection"], ProjectionTerm)
    assert isinstance(terms["zero_shot"], ZeroShotTerm)
    lam = cfg.methods.zero_shot.weight  # Eq. 5.2.5: (1 - lam) L_DML + lam L_ZS; the projection term is not L_DML
    assert terms["metric"].weight == pytest.approx(1 - lam) and terms["projection"].weight == 1.0
    assert terms["batch"].weight == pytest.approx((1 - lam) * cfg.methods.ccp.batch_loss_weight)
    assert isinstance(parts.stopper, ProjectionStopping) and parts.stopper.patience == cfg.train.patience
    assert parts.stopper.projection_patience == cfg.methods.ccp.patience
