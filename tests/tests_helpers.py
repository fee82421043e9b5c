"""Shared settings of the tests: a tiny training run on a few glyph classes."""

TINY_OVERRIDES = [
    "data.max_classes=24",
    "data.val_fraction=0.25",
    "model.embedding_dim=16",
    "train.batch_size=16",
    "train.m_per_class=4",
    "train.max_steps=8",
    "train.val_every=4",
    "train.log_every=2",
    "eval.batch_size=128",
]
