"""Every shipped config outside configs/experiments (the top-level ones, configs/testbed and configs/font_testbed, its
``_*.yaml`` fragments aside) trains 2 steps on tiny data.

A font-testbed file that only names a glyph-testbed method file and the regime (``base: [../testbed/<x>.yaml,
_regime.yaml]`` and its ``name``) adds nothing a 2-step run could break beyond what its method file (trained here)
and ``font_testbed.yaml`` (the regime on the real font table, trained here) show, so it is only loaded
(``tests/test_config.py``); each font step loads the font table (about 1 s a split), which costs the suite minutes.

configs/experiments has its own smoke test (test_experiment_configs.py). Here the overrides only shrink a config to
a few glyph classes: the pretrained backbone is not built (``model.pretrained=false``; the cache takes minutes), a
config that validates on a split keeps its split (``data.val_fraction=0``), FastAP's Hard batches get enough
classes for two categories, CCP configs with more proxies per class than the tiny classes hold get 3, and SFT
configs start with data-initialised centres (else the tiny batches hold classes without a centre and 2 steps
generate nothing: N-pair + joint scoring passed here and failed at step 21 of the real run). Every
other setting of the file, its method sections included, is trained as written, so a combination of methods that
cannot build or step (as CCP + GSP + zero-shot once could not) fails here.
"""

from pathlib import Path

import pytest
import yaml

from dmlkit.assemble import build_trainer
from dmlkit.config import load_config
from tests_helpers import TINY_OVERRIDES

ROOT = Path(__file__).resolve().parents[1]


def _adds_to_its_bases(path: Path) -> bool:
    """Whether a font-testbed file sets more than ``base`` and ``name`` (or has a single base, the regime's own)."""
    values = yaml.safe_load(path.read_text())
    return (
        bool(set(values) - {"base", "name"})
        or not isinstance(values.get("base"), list)
        or any("_regime" not in b and not b.startswith("../testbed/") for b in values["base"])
    )


FONT_CONFIGS = [p for p in sorted((ROOT / "configs" / "font_testbed").glob("*.yaml")) if not p.name.startswith("_")]
CONFIGS = (
    sorted((ROOT / "configs").glob("*.yaml"))
    + sorted((ROOT / "configs" / "testbed").glob("*.yaml"))
    + [p for p in FONT_CONFIGS if p.stem == "font_testbed" or _adds_to_its_bases(p)]
)
SMOKE = [o for o in TINY_OVERRIDES if not o.startswith("model.embedding_dim")] + [
    "train.max_steps=2",
    "train.val_every=2",
    "plots=false",
    "eval.clustering=false",
    "train.batch_size=12",
    "train.m_per_class=3",
]


def shrink(path: Path) -> list[str]:
    """The overrides that fit ``path``'s config to the tiny data, and nothing else."""
    cfg = load_config(path)
    extra = []
    if cfg.model.pretrained:
        extra.append("model.pretrained=false")
    if cfg.data.val_split:
        extra.append("data.val_fraction=0")
    if cfg.train.sampler == "fastap_hard":
        extra.append("data.max_classes=300")
    elif cfg.data.name == "font_glyphs":  # its first classes hold 150-210 images: 8 keep a split near 1,400
        extra.append("data.max_classes=8")
    if cfg.methods.sft.name and cfg.methods.sft.centers != "random" and cfg.methods.sft.init_centers == "none":
        extra.append("methods.sft.init_centers=data")  # centres from step 0, so 2 steps score a generated batch
    if cfg.methods.ccp.enabled and cfg.methods.ccp.proxies_per_class > 3:
        extra += [
            "methods.ccp.proxies_per_class=3",
            f"methods.ccp.pool_size={max(3, min(cfg.methods.ccp.pool_size, 6))}",
        ]
    return extra


def test_the_list_covers_the_testbed():
    names = {p.stem for p in CONFIGS}
    assert {"quickstart", "testbed", "testbed_ccp", "testbed_gsp", "testbed_sft"} <= names
    # the font regime itself and every font file that adds to its bases; a pure [method, regime] join is only loaded
    assert {"font_testbed", "font_testbed_ccp", "font_testbed_val", "font_testbed_longtail_balanced"} <= names
    assert not {"font_testbed_gsp", "font_testbed_contrastive_c2"} & names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(ROOT / "configs")))
def test_shipped_config_trains_two_steps(path, tmp_path):
    own = []
    if load_config(path).data.name == "image_folder":  # a user's own photos: a generated class folder stands in
        from test_image_folder import write_flat

        own = [f"data.root={write_flat(tmp_path / 'photos', num_classes=24, per_class=6)}", "data.image_size=16"]
    cfg = load_config(path, SMOKE + shrink(path) + own)
    summary = build_trainer(cfg, tmp_path / "run", quiet=True).fit()
    assert summary["steps"] == 2
    assert summary["name"] == load_config(path).name
