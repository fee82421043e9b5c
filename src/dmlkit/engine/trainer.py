"""The training loop: build the run's parts, optimise, validate, stop early, checkpoint, evaluate.

One place builds the model (``build_embedder``), one the objective
(``build_objective`` -> ``Objective`` of named terms), and ``Trainer.fit`` runs
the loop on Lightning Fabric. Every random choice comes from the config's seed:
the model's initialisation, the sampler's batches (seed, epoch) and the
augmentation (seed, epoch, index), so a run resumed from ``last.pt`` ends with
the same weights and metrics as an uninterrupted one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn
from torch.utils.data import DataLoader, Sampler, Subset

from dmlkit.config import ExperimentConfig, dump_config, load_config
from dmlkit.augment import build_augmented_loss
from dmlkit.data import create_dataset, build_datasets, create_batch_sampler
from dmlkit.engine.callbacks import Callback
from dmlkit.engine.ccp import attach_ccp, ccp_terms
from dmlkit.engine.checkpoint import load_checkpoint, load_model_state, save_checkpoint
from dmlkit.engine.early_stopping import EarlyStopping
from dmlkit.engine.embed import embed_dataset
from dmlkit.engine.eval_model import evaluation_model
from dmlkit.distributed import ShardedBatchSampler, all_gather_no_grad, all_gather_with_grad, gather_shards, shard_indices
from dmlkit.engine.launch import fabric_options
from dmlkit.engine.signals import StopSignals, TrainingInterrupted, estimate_checkpoint_bytes
from dmlkit.engine.metrics_log import MetricsLog
from dmlkit.engine.objective import MetricLossTerm, Objective
from dmlkit.engine.optim import build_optimizer, build_scheduler, parameter_groups
from dmlkit.engine.progress import TrainingProgress
from dmlkit.engine.run_folder import RunFolder, write_json_atomic, write_text_atomic
from dmlkit.engine.warmup import warmup_callbacks
from dmlkit.engine.zero_shot_term import PLAN_KEY, zero_shot_objective_terms
from dmlkit.evaluation import clustering_metrics, retrieval_metrics
from dmlkit.losses import build_objective
from dmlkit.models import build_embedder
from dmlkit.proxies import build_ccp_loss


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or Inf; the run stops and keeps its last good checkpoint."""


@dataclass
class Splits:
    """The datasets of one run: train (augmented), validation and test (plain)."""

    train: Any
    val: Any
    test: Any
    val_is_test: bool = False
    reference: Any = None  # references of the test queries (eval.reference_split), or None


@dataclass
class LoopState:
    """Where the loop is; saved in every checkpoint."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    elapsed: float = 0.0
    history: list[dict] = field(default_factory=list)


def build_splits(cfg: ExperimentConfig) -> Splits:
    """Train / validation (class-disjoint hold-out of the train classes) / test datasets of ``cfg.data``.

    With ``data.val_fraction: 0`` the test split monitors training (the conventional protocol).
    """
    sets = build_datasets(cfg.data, seed=cfg.seed, test_split=cfg.eval.split)
    reference = reference_dataset(cfg)
    if "val" not in sets:
        return Splits(train=sets["train"], val=sets["test"], test=sets["test"], val_is_test=True, reference=reference)
    return Splits(train=sets["train"], val=sets["val"], test=sets["test"], reference=reference)


def run_split(cfg: ExperimentConfig, split: str) -> Any:
    """Split ``split`` of the run's dataset, un-augmented."""
    d = cfg.data
    common = dict(root=d.root, seed=cfg.seed, augment=False, image_size=d.image_size, max_classes=d.max_classes, **d.params)
    return create_dataset(d.name, split, **common)


def reference_dataset(cfg: ExperimentConfig) -> Any:
    """The un-augmented ``eval.reference_split`` of the run's dataset (query -> gallery), or None."""
    return None if cfg.eval.reference_split is None else run_split(cfg, cfg.eval.reference_split)


def build_model(cfg: ExperimentConfig, in_channels: int, train_labels: torch.Tensor, num_classes: int) -> tuple[nn.Module, Objective]:
    """The embedder and the objective, initialised from the run's seed without touching global RNG state.

    The metric loss is wrapped by the feature augmenter of ``cfg.augment`` (SFT, Eq. 10) when one is named.
    """
    if cfg.augment.normalize_input and cfg.model.normalize != "none":
        raise ValueError(
            "augment.normalize_input needs pre-normalisation embeddings: set model.normalize: none "
            "(the augmenter then normalises them itself for the loss)"
        )
    dim = cfg.model.embedding_dim
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = build_embedder(cfg.model, in_channels=in_channels)
        loss, miner = build_objective(cfg.loss, num_classes=num_classes, embedding_size=dim)
    counts = torch.bincount(train_labels, minlength=num_classes)
    loss = build_augmented_loss(cfg.augment, loss, num_classes, dim, class_counts=counts, seed=cfg.seed)
    loss, miner = build_ccp_loss(cfg.ccp, loss, miner, num_classes, dim, seed=cfg.seed)  # CCP, Eq. 3.2.11
    if cfg.loss.zero_shot_weight != 0:  # (1 - lam) L_DML + lam L_ZS, Eq. 5.2.5 (GSP)
        terms = zero_shot_objective_terms(
            loss, miner, model.pooling, num_classes, cfg.loss.zero_shot_weight, seed=cfg.seed, **cfg.loss.zero_shot_params
        )
        return model, Objective(terms)
    return model, Objective([MetricLossTerm(loss, miner), *ccp_terms(cfg.ccp, model)])


class _SkipBatches(Sampler):
    """A batch sampler that skips its first ``skip`` batches (resume inside an epoch)."""

    def __init__(self, batch_sampler: Sampler, skip: int) -> None:
        self.batch_sampler, self.skip = batch_sampler, skip

    def __iter__(self) -> Iterator[list[int]]:
        for i, batch in enumerate(self.batch_sampler):
            if i >= self.skip:
                yield batch

    def __len__(self) -> int:
        return max(0, len(self.batch_sampler) - self.skip)


class Trainer:
    """Runs one experiment into a run folder; ``fit()`` returns the summary it writes."""

    def __init__(
        self, cfg: ExperimentConfig, run_dir: str | Path, callbacks: list[Callback] = (), quiet: bool = False,
        resuming: bool = False,
    ) -> None:
        self.cfg = cfg
        self.folder = RunFolder(run_dir)
        self.callbacks = list(callbacks)
        self.quiet = quiet
        self.resuming = resuming
        self.state = LoopState()

    @classmethod
    def resume(cls, run_dir: str | Path, callbacks: list[Callback] = (), quiet: bool = False) -> "Trainer":
        """A trainer that continues the run in ``run_dir`` from its last checkpoint, with the run's own config."""
        folder = RunFolder(run_dir)
        folder.prepare_resume()
        return cls(load_config(folder.config), run_dir, callbacks, quiet, resuming=True)

    # ----------------------------------------------------------------- set-up
    def _setup(self) -> None:
        from lightning.fabric import Fabric

        t = self.cfg.train
        self.fabric = Fabric(**fabric_options(t))  # DDP under torchrun (engine/launch.py)
        self.fabric.launch()
        if self.resuming:
            self.folder.prepare_resume()
            if self.fabric.is_global_zero:
                self.folder.acquire()
        elif self.fabric.is_global_zero:  # only rank 0 writes the run folder
            self.folder.prepare_new()
            self.folder.acquire()
            write_text_atomic(self.folder.config, dump_config(self.cfg))
        self.fabric.barrier()
        self.splits = build_splits(self.cfg)
        train = self.splits.train
        if train.num_classes < 2:
            raise ValueError(
                f"the training split has {train.num_classes} class; metric learning needs at least 2 "
                "(raise data.max_classes, or lower data.val_fraction so that training keeps several classes)"
            )
        self.model, self.objective = build_model(self.cfg, train.in_channels, train.labels, train.num_classes)
        optimizer = build_optimizer(parameter_groups(self.model, self.objective, t), t)
        self.scheduler = build_scheduler(optimizer, t)
        if self.fabric.is_global_zero:  # a full disk is reported before training starts
            slots = {"adam": 2, "adamw": 2}.get(t.optimizer, 1)
            self.folder.check_space(3 * estimate_checkpoint_bytes(self.model, self.objective, slots))
        self.model, self.optimizer = self.fabric.setup(self.model, optimizer)
        self.needs_plan = any(getattr(term, "needs_transport_plan", False) for term in self.objective.terms)
        if self.needs_plan:
            self.model.mark_forward_method("encode")
        self.objective = self.fabric.to_device(self.objective)
        params = {"m": t.m_per_class, **t.sampler_params} if t.sampler == "m_per_class" else t.sampler_params
        self.sampler = create_batch_sampler(t.sampler, train, t.batch_size, seed=self.cfg.seed, **params)
        if self.fabric.world_size > 1:  # each process takes its slice of every global batch
            self.sampler = ShardedBatchSampler(self.sampler, self.fabric.global_rank, self.fabric.world_size)
        self.stopper = EarlyStopping(t.patience)
        self.callbacks = attach_ccp(self) + self.callbacks  # CCP: its stopper and callback (Algorithm 1)
        self.callbacks = warmup_callbacks(self) + self.callbacks  # train.warmup_steps: head-only warm-up
        self.log = MetricsLog(self.folder.metrics, write=self.fabric.is_global_zero)
        if self.resuming:
            self._load_last()

    def _checkpoint_state(self) -> dict[str, Any]:
        s = self.state
        return {
            "model": self.model.state_dict(),
            "objective": self.objective.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else {},
            "sampler": self.sampler.state_dict(),
            "early_stopping": self.stopper.state_dict(),
            "loop": {"step": s.step, "epoch": s.epoch, "batch_in_epoch": s.batch_in_epoch, "elapsed": s.elapsed},
        }

    def _load_last(self) -> None:
        ckpt = load_checkpoint(self.folder.last_checkpoint)
        load_model_state(self.model, ckpt["model"], str(self.folder.last_checkpoint))
        self.objective.load_state_dict(ckpt["objective"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(ckpt["scheduler"])
        self.sampler.load_state_dict(ckpt["sampler"])
        self.stopper.load_state_dict(ckpt["early_stopping"])
        loop = ckpt["loop"]
        self.state = LoopState(step=loop["step"], epoch=loop["epoch"], batch_in_epoch=loop["batch_in_epoch"], elapsed=loop["elapsed"])
        self.log.truncate_after(self.state.step)
        self.state.history = [r for r in self.log.read() if r.get("split") == "val"]

    # ------------------------------------------------------------------ loop
    def fit(self) -> dict[str, Any]:
        try:
            self._setup()
            t = self.cfg.train
            for cb in self.callbacks:
                cb.on_train_start(self)
            progress = TrainingProgress(total=t.max_steps, start=self.state.step, quiet=self.quiet or not self.fabric.is_global_zero)
            with progress, StopSignals() as self.signals:  # SIGTERM/SIGINT: save last.pt, then stop
                while self.state.step < t.max_steps and not self.stopper.should_stop:
                    self._run_epoch(progress)
            summary = self._finish()
            for cb in self.callbacks:
                cb.on_train_end(self, summary)
            return summary
        finally:
            self.folder.release()

    def _epoch_loader(self) -> DataLoader:
        s = self.state
        self.sampler.set_epoch(s.epoch)
        self.splits.train.set_epoch(s.epoch)
        batches = _SkipBatches(self.sampler, s.batch_in_epoch)
        return DataLoader(self.splits.train, batch_sampler=batches, num_workers=self.cfg.data.num_workers)

    def _run_epoch(self, progress: TrainingProgress) -> None:
        t, s = self.cfg.train, self.state
        started = time.perf_counter()
        for images, labels in self._epoch_loader():
            s.step += 1
            s.batch_in_epoch += 1
            outputs = self._train_step(images, labels)
            s.elapsed += time.perf_counter() - started
            started = time.perf_counter()
            progress.advance(outputs["loss"])
            if s.step % t.log_every == 0:
                self.log.append({"split": "train", "step": s.step, "epoch": s.epoch, **outputs, "elapsed": round(s.elapsed, 3)})
            if s.step % t.val_every == 0 or s.step == t.max_steps:
                score = self._validate()
                progress.show_validation(t.val_metric, score)
                started = time.perf_counter()
            self._stop_if_signalled()
            if s.step >= t.max_steps or self.stopper.should_stop:
                return
        s.epoch += 1
        s.batch_in_epoch = 0

    def _global_batch(self, embeddings: torch.Tensor, labels: torch.Tensor, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Embeddings (with gradient) and labels of every process's slice, in global-batch order."""
        embeddings, labels = all_gather_with_grad(embeddings), all_gather_no_grad(labels)
        batch["labels"] = labels
        if PLAN_KEY in batch:
            if not isinstance(batch[PLAN_KEY], torch.Tensor):
                raise ValueError("the GSP transport plan must be a tensor with a batch dimension to train on several processes")
            batch[PLAN_KEY] = all_gather_with_grad(batch[PLAN_KEY])
        return embeddings, labels

    def _save(self, path: Path, state: dict[str, Any]) -> None:
        """Write a checkpoint from rank 0 only (every process holds the same state)."""
        if self.fabric.is_global_zero:
            save_checkpoint(path, state)

    def _stop_if_signalled(self) -> None:
        """After a step: on SIGTERM/SIGINT (on any process) write last.pt and raise ``TrainingInterrupted``."""
        received = self.signals.received or 0
        if self.fabric.world_size > 1:  # every process stops after the same step
            flags = all_gather_no_grad(torch.tensor([received], device=self.fabric.device))
            received = int(flags.max())
        if received:
            self._save(self.folder.last_checkpoint, self._checkpoint_state())
            self.fabric.barrier()
            raise TrainingInterrupted(received, self.state.step, str(self.folder.path))

    def _train_step(self, images: torch.Tensor, labels: torch.Tensor) -> dict[str, Any]:
        images, labels = self.fabric.to_device((images, labels))
        self.model.train()
        batch = {"images": images, "labels": labels, "step": self.state.step}
        if self.needs_plan:  # the GSP plan for the zero-shot prediction loss
            encoded = self.model.encode(images)
            embeddings, batch[PLAN_KEY] = encoded.embedding, encoded.plan
        else:
            embeddings = self.model(images)
        if embeddings.dtype in (torch.float16, torch.bfloat16):  # losses, miners and proxies run in float32
            embeddings = embeddings.float()
        if self.fabric.world_size > 1:  # the objective sees the global batch (dmlkit.distributed.gather)
            embeddings, labels = self._global_batch(embeddings, labels, batch)
        total, terms = self.objective(embeddings, labels, batch)
        if not torch.isfinite(total):
            raise NonFiniteLossError(
                f"the loss became {float(total.detach())} at step {self.state.step} (terms: {terms}); "
                f"the last good checkpoint is kept in '{self.folder.last_checkpoint}'. "
                "Lower train.lr or set train.grad_clip, then resume or restart."
            )
        self.optimizer.zero_grad(set_to_none=True)
        self.fabric.backward(total)
        if self.cfg.train.grad_clip:
            self.fabric.clip_gradients(self.model, self.optimizer, max_norm=self.cfg.train.grad_clip)
        self.optimizer.step()
        if self.scheduler is not None and self.cfg.train.schedule == "step":
            self.scheduler.step()
        outputs = {"loss": float(total.detach()), **({f"loss/{k}": v for k, v in terms.items()} if len(terms) > 1 else {})}
        outputs["lr"] = self.optimizer.param_groups[0]["lr"]
        for cb in self.callbacks:
            cb.on_batch_end(self, batch, outputs)
        return outputs

    # ------------------------------------------------------------ validation
    def eval_model(self) -> nn.Module:
        """The module evaluated: the embedder, or the classifier outputs (``eval.embedding``)."""
        return evaluation_model(self.model, self.objective, self.cfg.eval.embedding, self.cfg.augment.normalize_input)

    def _embed(self, dataset: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Embeddings and labels of ``dataset``; with several processes each embeds a shard, then all gather."""
        bs, device, n = self.cfg.eval.batch_size, self.fabric.device, len(dataset)
        if self.fabric.world_size == 1:
            return embed_dataset(self.eval_model(), dataset, bs, device)
        idx = shard_indices(n, self.fabric.global_rank, self.fabric.world_size)
        model = evaluation_model(  # the bare module: no DDP collectives
            self.model.module, self.objective, self.cfg.eval.embedding, self.cfg.augment.normalize_input
        )
        local, labels = embed_dataset(model, Subset(dataset, idx.tolist()), bs, device)
        idx = idx.to(device)
        return gather_shards(local.to(device), idx, n).cpu(), gather_shards(labels.to(device), idx, n).cpu()

    def evaluate(self, dataset: Any, with_clustering: bool = False, reference: Any = None) -> dict[str, float]:
        """Retrieval metrics of ``dataset`` within itself, or as queries against ``reference``."""
        embeddings, labels = self._embed(dataset)
        refs = self._embed(reference) if reference is not None else (None, None)
        metrics = None
        if self.fabric.is_global_zero:  # rank 0 computes, every process gets the same values
            metrics = retrieval_metrics(embeddings, labels, *refs, ks=tuple(self.cfg.eval.ks))
            if with_clustering:
                metrics.update(clustering_metrics(embeddings, labels, seed=self.cfg.seed))
        return self.fabric.broadcast(metrics) if self.fabric.world_size > 1 else metrics

    def _validate(self) -> float:
        t, s = self.cfg.train, self.state
        metrics = self.evaluate(self.splits.val, reference=self.splits.reference if self.splits.val_is_test else None)
        if t.val_metric not in metrics:
            raise ValueError(f"train.val_metric '{t.val_metric}' is not a retrieval metric; valid: {', '.join(metrics)}")
        score = metrics[t.val_metric]
        improved = self.stopper.update(score, s.step)
        if self.scheduler is not None and t.schedule == "plateau":
            self.scheduler.step(score)
        record = {"split": "val", "step": s.step, "epoch": s.epoch, **metrics, "best": improved}
        self.log.append(record)
        s.history.append(record)
        if improved:
            self._save(self.folder.best_checkpoint, {"model": self.model.state_dict(), "objective": self.objective.state_dict(), "step": s.step, "metrics": metrics})
        self._save(self.folder.last_checkpoint, self._checkpoint_state())
        for cb in self.callbacks:
            cb.on_validation_end(self, metrics)
        return score

    # ----------------------------------------------------------------- finish
    def _restore_best(self) -> None:
        if self.folder.best_checkpoint.is_file():
            best = load_checkpoint(self.folder.best_checkpoint)
            load_model_state(self.model, best["model"], str(self.folder.best_checkpoint))
            self.objective.load_state_dict(best["objective"])

    def _finish(self) -> dict[str, Any]:
        self.fabric.barrier()  # rank 0 has written best.pt
        self._restore_best()
        test_split = self.splits.test
        embeddings, labels = self._embed(test_split)
        refs = self._embed(self.splits.reference) if self.splits.reference is not None else (None, None)
        test = retrieval_metrics(embeddings, labels, *refs, ks=tuple(self.cfg.eval.ks))
        if self.cfg.eval.clustering:
            test.update(clustering_metrics(embeddings, labels, seed=self.cfg.seed))
        self.log.append({"split": "test", "step": self.state.step, **test})
        summary = {
            "name": self.cfg.name,
            "seed": self.cfg.seed,
            "steps": self.state.step,
            "stopped_early": self.stopper.should_stop,
            "best_step": self.stopper.best_step,
            "best_val": {"metric": self.cfg.train.val_metric, "value": self.stopper.best_score},
            "validated_on_test": self.splits.val_is_test,
            "train_seconds": round(self.state.elapsed, 2),
            "test": test,
            "num_parameters": sum(p.numel() for p in self.model.parameters()),
        }
        if self.fabric.is_global_zero:
            write_json_atomic(self.folder.summary, summary)
            if self.cfg.plots:
                self._plot(embeddings, labels)
        return summary

    def _plot(self, embeddings: torch.Tensor, labels: torch.Tensor) -> None:
        from dmlkit.viz import plots

        self.folder.plots.mkdir(exist_ok=True)
        plots.training_curves(self.log.read(), self.folder.plots / "training_curves.png")
        plots.embedding_projection(embeddings, labels, self.folder.plots / "test_embeddings_pca.png")
        plots.distance_histogram(embeddings, labels, self.folder.plots / "test_distances.png", seed=self.cfg.seed)


def default_run_dir(cfg: ExperimentConfig) -> Path:
    return Path(cfg.output_dir) / cfg.name
