"""The one loader of a finished run: rebuild its model (and objective) from config.yaml, load a checkpoint.

Every command that uses a trained run goes through ``load_finished_run`` (``dmlkit evaluate``,
``gallery``, ``embed`` / ``search`` / ``serve``, ``export``, diagnostics, protocols, studies), and
embeds with ``LoadedRun.eval_model``, the module the trainer evaluated: the same vectors
everywhere (for SFT-d, the L2-normalised embedding).

``load_finished_run(run, in_channels=C)`` needs no dataset (a run can embed and serve images after
its training data is gone): only the embedder is rebuilt, unless the run evaluates a classifier
loss's outputs (``eval.embedding: classifier``), whose shape comes from the training classes.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Subset

from dmlkit.assemble.build import build_model, build_splits, run_split
from dmlkit.assemble.eval_model import evaluation_model, feature_model
from dmlkit.assemble.run_records import with_split_record
from dmlkit.config import ExperimentConfig, load_config
from dmlkit.engine.checkpoint import CheckpointError, load_checkpoint, load_model_state, non_finite_entries
from dmlkit.distributed import shard_indices
from dmlkit.engine.embed import embed_dataset
from dmlkit.engine.launch import torchrun_world
from dmlkit.engine.run_folder import RunFolder
from dmlkit.evaluation.evaluate_embeddings import evaluate_embedding_shards, evaluate_embeddings
from dmlkit.io import atomic_write, write_json_atomic
from dmlkit.methods import Method, build_methods
from dmlkit.models import build_embedder

__all__ = ["LoadedRun", "embed_run", "evaluate_run", "load_finished_run", "resolve_checkpoint"]


def resolve_checkpoint(run_or_checkpoint: str | Path) -> tuple[RunFolder, Path]:
    """Accept a run folder (uses its best.pt, else last.pt) or a checkpoint file inside a run folder."""
    path = Path(run_or_checkpoint)
    if not path.exists():
        raise ValueError(
            f"no such run folder or checkpoint: '{path}'; pass a folder written by dmlkit train (e.g. runs/quickstart)"
        )
    if path.is_dir():
        folder = RunFolder(path)
        checkpoint = folder.best_checkpoint if folder.best_checkpoint.is_file() else folder.last_checkpoint
    else:
        folder, checkpoint = RunFolder(path.parent), path
    if not folder.config.is_file():
        raise ValueError(f"'{folder.path}' has no config.yaml; pass a run folder written by dmlkit train")
    if not checkpoint.is_file():
        raise ValueError(f"'{folder.path}' has no best.pt or last.pt: the run saved no weights to load")
    return folder, checkpoint


@dataclass
class LoadedRun:
    """A finished run rebuilt from its folder: config, model (and objective) with the checkpoint's weights.

    ``objective`` is None when the run was loaded without its dataset.
    """

    cfg: ExperimentConfig
    model: nn.Module
    objective: nn.Module | None
    methods: list[Method]
    folder: RunFolder
    checkpoint: Path

    @property
    def features(self) -> nn.Module:
        """The embedding as the run's methods define it (``eval.embedding: features``)."""
        return feature_model(self.model, self.methods)

    @property
    def eval_model(self) -> nn.Module:
        """The module the run is evaluated with (``eval.embedding``: the features or a classifier's outputs)."""
        return evaluation_model(self.model, self.objective, self.cfg.eval.embedding, self.methods)

    def split(self, name: str) -> Any:
        """The run's un-augmented split ``name``."""
        return run_split(self.cfg, name)

    def embed(self, dataset: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(embeddings, labels)`` of ``dataset`` under ``eval_model``."""
        return embed_dataset(self.eval_model, dataset, self.cfg.eval.batch_size)

    def embed_split(self, name: str, quiet: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """``(embeddings, labels)`` of split ``name``, kept in ``RUN/embeddings_<name>.pt`` for the checkpoint they
        came from (its path, size and modification time): ``evaluate`` then ``gallery`` embed the split once."""
        cache = self.folder.path / f"embeddings_{name}.pt"
        stat = self.checkpoint.stat()
        key = {"checkpoint": str(self.checkpoint.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        if cache.is_file():
            try:
                stored = torch.load(cache, map_location="cpu", weights_only=True)
                if stored.get("key") == key:
                    return stored["embeddings"], stored["labels"]
            except Exception:  # a torn or foreign file: embed again and replace it
                pass
        dataset = self.split(name)
        if not quiet:
            print(
                f"embedding {len(dataset)} {name} images with {self.checkpoint.name} ...", file=sys.stderr, flush=True
            )
        embeddings, labels = self.embed(dataset)
        try:
            with atomic_write(cache) as fh:
                torch.save({"key": key, "embeddings": embeddings, "labels": labels}, fh)
        except OSError:  # a read-only or full run folder: the embeddings are still returned, just not kept
            pass
        return embeddings, labels


def load_finished_run(run_or_checkpoint: str | Path, in_channels: int | None = None) -> LoadedRun:
    """The run's config, model and objective with the weights of ``run_or_checkpoint`` (best.pt of a run folder).

    With ``in_channels`` and a run evaluated on its features, no dataset is read and only the
    embedder is rebuilt (``objective`` is None).
    """
    folder, checkpoint = resolve_checkpoint(run_or_checkpoint)
    cfg = with_split_record(
        load_config(folder.config, stored=True), folder.path
    )  # a flat image folder: the run's own classes
    state = load_checkpoint(checkpoint)
    check_finite_weights(state, checkpoint)
    if in_channels is not None and cfg.eval.embedding == "features":
        model_cfg = dataclasses.replace(cfg.model, pretrained=False)  # the weights come from the checkpoint
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            model = build_embedder(model_cfg, in_channels=in_channels)
        objective, methods = None, build_methods(cfg)
    else:
        built = build_model(cfg, build_splits(cfg).train, pretrained=False)
        model, objective, methods = built.model, built.objective, built.methods
        if "objective" in state:
            objective.load_state_dict(state["objective"])
    load_model_state(model, state["model"], str(checkpoint))
    model.eval()
    return LoadedRun(cfg, model, objective, methods, folder, checkpoint)


def check_finite_weights(state: dict[str, Any], checkpoint: Path) -> None:
    """Refuse a checkpoint whose weights hold NaN or Inf: every embedding it makes would too."""
    bad = non_finite_entries(state["model"]) + [
        f"objective {k}" for k in non_finite_entries(state.get("objective", {}))
    ]
    if bad:
        raise CheckpointError(
            f"checkpoint '{checkpoint}' holds non-finite weights (NaN or Inf in {', '.join(bad[:5])}"
            f"{' and more' if len(bad) > 5 else ''}): every embedding it makes would be NaN. Use a checkpoint "
            "written before training diverged, or train again with a lower train.lr or a train.grad_clip"
        )


def embed_run(run_or_checkpoint: str | Path, split: str = "test") -> tuple[torch.Tensor, torch.Tensor]:
    """``(embeddings, labels)`` of ``split`` under the run's evaluated model."""
    run = load_finished_run(run_or_checkpoint)
    return run.embed(run.split(split))


def evaluate_run(run_or_checkpoint: str | Path, split: str = "test", quiet: bool = True) -> dict[str, Any]:
    """Retrieval and clustering metrics of the run's model on ``split``; also written to ``eval_<split>.json``.
    Not ``quiet``: a line on stderr says what is embedded before the (long) embedding starts.

    Launched by ``torchrun`` with several processes, each process embeds and searches its shard of
    the queries and of the gallery (``evaluate_embedding_shards``; gloo, CPU); the values are those of
    one process, every process returns them and rank 0 writes the file.
    """
    if torchrun_world() is not None:
        return _evaluate_run_sharded(run_or_checkpoint, split)
    run = load_finished_run(run_or_checkpoint)
    cfg = run.cfg
    embeddings, labels = run.embed_split(split, quiet=quiet)
    refs: tuple = (None, None)
    if cfg.eval.reference_split is not None and split == cfg.eval.split:  # queries against the gallery
        refs = run.embed_split(cfg.eval.reference_split, quiet=quiet)
    metrics = evaluate_embeddings(
        embeddings, labels, *refs, ks=tuple(cfg.eval.ks), clustering=cfg.eval.clustering, seed=cfg.seed
    )
    write_json_atomic(
        run.folder.path / f"eval_{split}.json", {"checkpoint": str(run.checkpoint), "split": split, **metrics}
    )
    return metrics


def _embed_shard(
    run: LoadedRun, dataset: Any, rank: int, world: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Process ``rank``'s shard (``shard_indices``) of ``dataset``: embeddings, labels, dataset positions."""
    idx = shard_indices(len(dataset), rank, world)
    if len(idx) == 0:  # more processes than items: an empty shard of the right width
        emb, lab = run.embed(Subset(dataset, [0]))
        return emb[:0], lab[:0], idx
    emb, lab = run.embed(Subset(dataset, idx.tolist()))
    return emb, lab, idx


def _evaluate_run_sharded(run_or_checkpoint: str | Path, split: str) -> dict[str, Any]:
    import torch.distributed as dist

    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo")  # torchrun's environment; the search runs on the CPU
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        run = load_finished_run(run_or_checkpoint)
        cfg = run.cfg
        queries = _embed_shard(run, run.split(split), rank, world)
        refs: tuple = (None, None, None)
        if cfg.eval.reference_split is not None and split == cfg.eval.split:  # queries against the gallery
            refs = _embed_shard(run, run.split(cfg.eval.reference_split), rank, world)
        metrics = evaluate_embedding_shards(
            *queries, *refs, ks=tuple(cfg.eval.ks), clustering=cfg.eval.clustering, seed=cfg.seed
        )
        if rank == 0:
            write_json_atomic(
                run.folder.path / f"eval_{split}.json", {"checkpoint": str(run.checkpoint), "split": split, **metrics}
            )
        dist.barrier()
        return metrics
    finally:
        if created:
            dist.destroy_process_group()
