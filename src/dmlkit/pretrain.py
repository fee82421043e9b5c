"""Build the pretrained backbones that configs name (``model.pretrained: <name>``): ``dmlkit pretrain``.

``ensure_pretrained(name)`` returns the checked cache entry of ``name`` (see
``dmlkit.assemble.pretrained`` for the recipes, the key and the checks), training it first when
it is missing, stale or corrupt (a corrupt or stale file is reported with a warning and replaced,
never used). Training is an ordinary run of the recipe's config with the trainer (seeded,
with its progress bar), in ``<entry>.run/`` next to the entry, so a pretraining stopped by
SIGTERM / Ctrl-C resumes from its ``last.pt`` the next time; the backbone of its best step is
then written atomically (``dmlkit.io.atomic_write``) with its key, architecture, input channels,
checksum and the run's summary, and the run folder and older entries of the name are removed.

``ensure_pretrained_for(cfg)`` does it for the name an experiment config uses, if any: the
``dmlkit train``, ``dmlkit protocol`` and ``dmlkit sweep`` commands call it before training
(in the parent process, before any parallel worker starts).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

from dmlkit.assemble import build_trainer, resume_trainer
from dmlkit.assemble.pretrained import (
    PRETRAINED_FORMAT,
    PretrainedCacheError,
    canonical_pretrained_name,
    is_pretrained_name,
    pretrained_key,
    pretrained_path,
    pretrained_recipe,
    read_pretrained,
    state_checksum,
    training_conditions,
)
from dmlkit.config import ExperimentConfig, dump_config
from dmlkit.data.catalog import create_dataset
from dmlkit.engine.checkpoint import load_checkpoint
from dmlkit.engine.run_folder import RunFolder
from dmlkit.io import atomic_write
from dmlkit.models.backbones import create_backbone

__all__ = ["ensure_pretrained", "ensure_pretrained_for", "pretrained_name"]


def pretrained_name(cfg: ExperimentConfig) -> str | None:
    """The pretrained-backbone name ``cfg`` uses (``model.pretrained`` when it is a recipe name), else None."""
    value = cfg.model.pretrained
    return canonical_pretrained_name(value) if is_pretrained_name(value) else None


def ensure_pretrained_for(cfg: ExperimentConfig, quiet: bool = False) -> Path | None:
    """Build (if needed) the pretrained backbone ``cfg`` names; its cache file, or None when it names none."""
    name = pretrained_name(cfg)
    return None if name is None else ensure_pretrained(name, quiet=quiet)


def ensure_pretrained(name: str, quiet: bool = False, force: bool = False) -> Path:
    """The cache file of pretrained backbone ``name``, trained first unless a valid entry exists (or ``force``)."""
    name = canonical_pretrained_name(name)
    key = pretrained_key(name)
    path = pretrained_path(name, key)
    if not force:
        try:
            if read_pretrained(name, path) is not None:
                return path
        except PretrainedCacheError as err:
            warnings.warn(f"pretrained backbone '{name}': {err}; building it again", stacklevel=2)
    _train(name, key, path, quiet)
    return path


def _train(name: str, key: str, path: Path, quiet: bool) -> None:
    cfg = pretrained_recipe(name)
    run_dir = path.with_name(path.stem + ".run")
    folder = RunFolder(run_dir)
    if folder.summary.is_file():  # trained, but stopped before the entry was written
        summary = json.loads(folder.summary.read_text())
    elif folder.last_checkpoint.is_file():
        summary = resume_trainer(run_dir, quiet=quiet).fit()
    else:
        if run_dir.exists():  # a start that left no checkpoint: nothing to keep
            shutil.rmtree(run_dir)
        if not quiet:
            print(f"dmlkit pretrain: training '{name}' ({cfg.train.max_steps} steps) into {run_dir}", file=sys.stderr)
        summary = build_trainer(cfg, run_dir, quiet=quiet).fit()
    state = _best_backbone(folder)
    in_channels = create_dataset(
        cfg.data.name,
        cfg.data.train_split,
        root=cfg.data.root,
        image_size=cfg.data.image_size,
        max_classes=1,
        **cfg.data.params,
    ).in_channels
    create_backbone(cfg.model.backbone, in_channels=in_channels).load_state_dict(state)  # fits, or fails before writing
    entry: dict[str, Any] = {
        "format": PRETRAINED_FORMAT,
        "name": name,
        "key": key,
        "backbone": cfg.model.backbone,
        "in_channels": int(in_channels),
        "state_dict": state,
        "checksum": state_checksum(state),
        "config": dump_config(cfg),
        "summary": _plain(summary),
        **training_conditions(cfg),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as fh:
        torch.save(entry, fh)
    ours = re.compile(rf"^{re.escape(name)}-[0-9a-f]{{16}}\.(pt|run)$")
    for old in path.parent.iterdir():  # the finished run folder, and entries of this name with older keys
        if old != path and ours.match(old.name):
            shutil.rmtree(old) if old.is_dir() else old.unlink(missing_ok=True)


def _best_backbone(folder: RunFolder) -> dict[str, torch.Tensor]:
    source = folder.best_checkpoint if folder.best_checkpoint.is_file() else folder.last_checkpoint
    model = load_checkpoint(source)["model"]
    state = {k[len("backbone.") :]: v.clone() for k, v in model.items() if k.startswith("backbone.")}
    if not state:
        raise ValueError(
            f"'{source}' holds no backbone weights (keys 'backbone.*'); delete {folder.path} and run again"
        )
    return state


def _plain(values: Any) -> Any:
    """``values`` with only JSON types (the entry is read with ``weights_only=True``)."""
    return json.loads(json.dumps(values, default=str))
