"""Batch samplers: which images form a batch, seeded by ``(seed, epoch)`` so a resumed run replays its batches.

- ``m_per_class``: ``EpochBatchSampler`` (their base) and ``MPerClassBatchSampler``, ``m`` images of each class;
- ``fastap``: FastAP's class- and category-based sampling (``RandomClassBatchSampler``, ``HardCategoryBatchSampler``);
- ``class_pool``: filling a batch with whole classes in a seeded order (``ClassPool``, ``ClassStream``), shared by
  the samplers;
- ``draws``: how often a sampler draws each category's images against its share of the data (``category_draws``);
- ``registry``: the samplers by name, ``create_batch_sampler`` / ``list_batch_samplers`` (also in ``dmlkit.data``).
"""
