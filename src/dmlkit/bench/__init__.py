"""Benchmarks run by ``dmlkit bench``: each module has ``run(...) -> dict`` and ``main(argv)``.

* :mod:`dmlkit.bench.retrieval` -- retrieval metrics against pytorch-metric-learning.
"""
