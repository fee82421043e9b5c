"""This project's pretrained backbones: the recipes ``model.pretrained: glyphs-resnet20[-brief]`` names.

Each recipe is an experiment config (as YAML values) registered with
``dmlkit.assemble.pretrained.register_pretrained_recipe``; the library trains, caches and checks the
backbone (``dmlkit pretrain``). The values are part of each cache entry's key: changing one gives another
entry (and other weights).
"""

from __future__ import annotations

import copy
from typing import Any

from dmlkit.assemble.pretrained import register_pretrained_recipe

__all__ = ["LAB_RECIPES", "register_recipes"]

#: name -> the experiment config (as YAML values) whose trained backbone the name stands for.
LAB_RECIPES: dict[str, dict[str, Any]] = {
    # ResNet-20 on the 1,416 pretraining classes of glyphs_testbed (Latin, Greek, Cyrillic, ... by code point),
    # normalized softmax, augmented, 1,500 steps of 128 images; best step by MAP@R on 10% held-out classes.
    "glyphs-resnet20": {
        "name": "pretrain-glyphs-resnet20",
        "seed": 0,
        "plots": False,
        "data": {"name": "glyphs_testbed", "train_split": "pretrain", "val_fraction": 0.1, "augment": True},
        "model": {"backbone": "resnet20", "pooling": "gap", "embedding_dim": 128, "normalize": "l2"},
        "loss": {"name": "normalized_softmax", "miner": None},
        "train": {
            "optimizer": "adam",
            "lr": 2.0e-3,
            "loss_lr": 1.0e-2,
            "weight_decay": 1.0e-4,
            "batch_size": 128,
            "m_per_class": 1,
            "max_steps": 1500,
            "schedule": "step",
            "step_size": 1000,
            "step_gamma": 0.1,
            "val_every": 250,
            "patience": 100,
            "threads": 1,
        },
        "eval": {"split": "val", "clustering": False},
    },
}
# The same recipe stopped after 300 of its 1,500 steps (no learning-rate drop): a weaker backbone, as a
# smaller or shorter-trained ImageNet model is beside a strong one. The font testbed measures its floor and
# the room fine-tuning has above it (docs/datasets.md).
LAB_RECIPES["glyphs-resnet20-brief"] = {
    **copy.deepcopy(LAB_RECIPES["glyphs-resnet20"]),
    "name": "pretrain-glyphs-resnet20-brief",
    "train": {**LAB_RECIPES["glyphs-resnet20"]["train"], "max_steps": 300, "val_every": 300},
}


def register_recipes() -> None:
    """Register every recipe of ``LAB_RECIPES`` (the lab's plug-in calls it once per process)."""
    for name, recipe in LAB_RECIPES.items():
        register_pretrained_recipe(name, recipe)
