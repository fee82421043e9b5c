"""What a run's datasets write into its folder, and how a finished or resumed run reads it back.

- ``classes.json``: the class split of a flat ``image_folder`` (``dmlkit.data.datasets.class_split``), with the
  validation classes held out of its train side; ``with_split_record`` hands it back to the dataset
  (``data.params.classes_file``) wherever a run's data is rebuilt from its folder (``evaluate``, ``gallery``,
  ``embed --split``, ``--resume``), so they use the classes the run trained and tested on.
- ``skipped_images.json``: with ``data.params.on_corrupt: skip``, every image each split dropped and why
  (empty lists when none was).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from dmlkit.config import ExperimentConfig
from dmlkit.data.datasets.class_split import RECORD_NAME
from dmlkit.engine.parts import Splits

__all__ = ["SKIPPED_NAME", "base_dataset", "run_records", "with_split_record"]

SKIPPED_NAME = "skipped_images.json"


def base_dataset(dataset: Any) -> Any:
    """The dataset that holds the files of ``dataset``, through its subsets (``LabelledSubset.dataset``)."""
    while hasattr(dataset, "dataset"):
        dataset = dataset.dataset
    return dataset


def run_records(cfg: ExperimentConfig, splits: Splits) -> dict[str, Any]:
    """``{file name: JSON content}`` of the records a fresh run of ``cfg`` writes into its folder."""
    named = [
        ("train", splits.train),
        ("validation", None if splits.val_is_test else splits.val),
        ("test", splits.test),
        ("reference", splits.reference),
    ]
    records: dict[str, Any] = {}
    split_record = getattr(base_dataset(splits.train), "split_record", None)
    if split_record is not None:
        held_out = [] if splits.val_is_test else list(splits.val.class_names)
        records[RECORD_NAME] = {**split_record, "validation": held_out}
    if cfg.data.params.get("on_corrupt") == "skip":
        skipped: dict[str, list[dict[str, str]]] = {}
        seen: set[int] = set()
        for name, dataset in named:
            base = base_dataset(dataset)
            if dataset is None or id(base) in seen:
                continue
            seen.add(id(base))
            key = getattr(base, "split", name)
            skipped[key] = [{"path": path, "reason": reason} for path, reason in getattr(base, "skipped", [])]
        records[SKIPPED_NAME] = skipped
    return records


def with_split_record(cfg: ExperimentConfig, folder: str | Path) -> ExperimentConfig:
    """``cfg`` with ``data.params.classes_file`` set to the run folder's ``classes.json`` when it has one."""
    record = Path(folder) / RECORD_NAME
    if not record.is_file() or "classes_file" in cfg.data.params:
        return cfg
    data = dataclasses.replace(cfg.data, params={**cfg.data.params, "classes_file": str(record)})
    return dataclasses.replace(cfg, data=data)
