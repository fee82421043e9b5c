"""Retrieval-metrics benchmark: dmlkit against pytorch-metric-learning.

Usage: python benchmarks/bench_retrieval.py [--n 60502] [--dim 128] [--per-class 5] [--seed 0]
(the same as ``dmlkit bench retrieval``; see ``dmlkit.bench.retrieval``).
"""

import sys

from dmlkit.bench.retrieval import main

if __name__ == "__main__":
    sys.exit(main())
