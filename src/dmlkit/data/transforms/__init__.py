"""Image transforms of the datasets.

- ``glyph_augment``: ``GlyphAugment``, the seeded torch augmentation of the glyph images (also in ``dmlkit.data``);
- ``image_crops``: the papers' RGB pipelines (resize, random-resized and centre crops, flips) of the benchmarks.
"""
