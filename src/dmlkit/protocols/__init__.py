"""Evaluation protocols: how runs are trained, repeated over seeds and reported.

- ``conventional``: train on the train split, early-stop on the test split (the
  "old-fashioned" protocol of the SFT and FastAP papers, reported with R@K).
- ``holdout``: the config as written (validation on a class-disjoint hold-out of the train classes).
- ``fair``: class-disjoint 4-fold cross-validation of the train classes (Musgrave et al.,
  the thesis' Sec. 3.3.2.1): 128-d models averaged and the 512-d concatenation.

``run_protocol`` runs one protocol for several configs and seeds and writes a markdown table.
"""

from dmlkit.protocols.results import run_protocol
from dmlkit.protocols.table import COLUMN_SETS, markdown_table, mean_std

__all__ = ["run_protocol", "markdown_table", "mean_std", "COLUMN_SETS"]
