"""The training loop: optimise, validate, stop early, checkpoint, evaluate; it knows no method.

``Trainer(train_cfg, eval_cfg, run_dir, parts)`` runs the parts that ``dmlkit.assemble`` built
from an experiment config (``RunParts``: datasets, model, objective of named terms, sampler,
parameter groups, stopping rule, callbacks, the batch encoder and the evaluated module) on
Lightning Fabric. Methods reach the loop only through those parts and their callbacks. Every
random choice comes from the run's seed: the model's initialisation, the sampler's batches
(seed, epoch) and the augmentation (seed, epoch, index), so a run resumed from ``last.pt`` ends
with the same weights and metrics as an uninterrupted one.

The loop's helpers live beside it: the run folder's start or continuation (``engine/resume.py``), the
training loader (``engine/train_loader.py``), what several processes change (``engine/processes.py``) and
the evaluation (``engine/evaluator.py``).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dmlkit.engine.callbacks import Callback, callback_states, load_callback_states
from dmlkit.engine.checkpoint import (
    CheckpointWriteError,
    load_checkpoint,
    load_model_state,
    non_finite_entries,
    save_checkpoint,
)
from dmlkit.engine.config import EvalConfig, TrainConfig, check_val_metric
from dmlkit.engine.environment import current_environment
from dmlkit.engine.evaluator import Evaluator, validation_score
from dmlkit.engine.execution import check_execution, prepare_model, to_channels_last
from dmlkit.engine.launch import check_precision, check_training_extras, new_fabric
from dmlkit.engine.metrics_log import MetricsLog
from dmlkit.engine.optim import build_optimizer, build_scheduler
from dmlkit.engine.parts import RunParts
from dmlkit.engine.peers import is_peer_failure
from dmlkit.engine.processes import global_batch, shard_sampler, signal_anywhere
from dmlkit.engine.progress import TrainingProgress
from dmlkit.engine.resume import (
    finished_summary,
    kept_checkpoint,
    open_run_folder,
    peer_lost,
    record_resume,
    resume_command,
)
from dmlkit.engine.run_folder import RunFolder
from dmlkit.engine.signals import StopSignals, TrainingInterrupted, estimate_checkpoint_bytes
from dmlkit.engine.tensorboard import TensorBoardLogger
from dmlkit.engine.train_loader import EpochLoader
from dmlkit.engine.weight_decay import exclude_from_weight_decay
from dmlkit.evaluation.retrieval import metric_names
from dmlkit.faults import fault_point
from dmlkit.io import write_json_atomic


class NonFiniteError(RuntimeError):
    """The loss or the weights became NaN or Inf; the run stops and keeps its last finite checkpoint."""


class NonFiniteLossError(NonFiniteError):
    """The loss of a training step became NaN or Inf (checked every step, before the backward pass)."""


class NonFiniteWeightsError(NonFiniteError):
    """A weight or buffer of the model or the objective became NaN or Inf (checked before every validation
    and checkpoint, so no checkpoint ever holds one)."""


@dataclass
class LoopState:
    """Where the loop is; saved in every checkpoint."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    elapsed: float = 0.0
    history: list[dict] = field(default_factory=list)


class Trainer:
    """Runs one experiment's parts into a run folder; ``fit()`` returns the summary it writes."""

    def __init__(
        self,
        train: TrainConfig,
        evaluation: EvalConfig,
        run_dir: str | Path,
        parts: RunParts,
        callbacks: list[Callback] = (),
        quiet: bool = False,
        resuming: bool = False,
    ) -> None:
        check_val_metric(train, evaluation, metric_names(evaluation.ks))  # before the run folder is made
        check_precision(train)
        check_execution(parts.model, train.channels_last, train.compile)
        check_training_extras(evaluation, parts.plots, train.tensorboard)
        self.train_cfg, self.eval_cfg, self.parts = train, evaluation, parts
        self.folder = RunFolder(run_dir)
        # the TensorBoard logger comes last, so it sees what the other callbacks add to a step's outputs
        self.callbacks = [
            *parts.callbacks,
            *callbacks,
            *([TensorBoardLogger(train.log_every)] if train.tensorboard else []),
        ]
        self.quiet = quiet
        self.resuming = resuming
        self.plots = parts.plots
        self.state = LoopState()
        self.splits, self.stopper = parts.splits, parts.stopper
        self.sampler: Any = parts.batch_sampler  # with several processes, this process's slice of it (_setup)
        # made in _setup, once Fabric has launched the run's processes
        self.fabric: Any = None  # lightning.fabric.Fabric
        self.model: Any = None  # the model wrapped by Fabric
        self.optimizer: Any = None  # wrapped by Fabric
        self.scheduler: Any = None  # None without a learning-rate schedule
        self.objective: nn.Module | None = None
        self.evaluator: Evaluator | None = None
        self.log: MetricsLog | None = None
        self.loader: EpochLoader | None = None  # dropped when fit ends, so its persistent workers stop
        self.signals: StopSignals | None = None  # while fit runs
        self._test_embeddings: tuple[Any, Any] = (None, None)  # the final test's embeddings and labels, for the plots
        self.resumed_at: tuple[int, float] | None = None  # (step, train seconds) of the last.pt a resume continued

    # ----------------------------------------------------------------- set-up
    def _launch(self) -> None:
        self.fabric = new_fabric(self.train_cfg)  # DDP under torchrun (engine/launch.py)
        self.fabric.launch()

    def _setup(self) -> None:
        t, parts = self.train_cfg, self.parts
        self._launch()
        if self._on_gpu():  # fixed image sizes: let cuDNN pick the fastest convolution algorithms
            torch.backends.cudnn.benchmark = True
        environment = current_environment(
            self.fabric.world_size, getattr(self.fabric.strategy, "num_nodes", 1), self.fabric.device, t.precision
        )
        if parts.pretrained is not None:  # the weights fine-tuned from: protocols pair runs only on the same ones
            environment["pretrained"] = parts.pretrained
        resume = open_run_folder(
            self.folder, environment, parts.config_text, self.resuming, self.fabric.is_global_zero, parts.records
        )
        self.fabric.barrier()
        groups = exclude_from_weight_decay(parts.param_groups, parts.model, parts.objective)  # no_weight_decay()
        optimizer = build_optimizer(groups, t)
        self.scheduler = build_scheduler(optimizer, t)
        if self.fabric.is_global_zero:  # a full disk is reported before training starts
            slots = {"adam": 2, "adamw": 2}.get(t.optimizer, 1)
            self.folder.check_space(3 * estimate_checkpoint_bytes(parts.model, parts.objective, slots))
        model = prepare_model(parts.model, t.channels_last, t.compile)  # NHWC layout, torch.compile
        self.model, self.optimizer = self.fabric.setup(model, optimizer)
        for name in parts.forward_methods:  # model methods besides forward that parts.encode calls
            self.model.mark_forward_method(name)
        self.objective = self.fabric.to_device(parts.objective)
        self.evaluator = Evaluator(
            self.fabric,
            self.eval_cfg,
            self.eval_model,
            lambda: self.parts.eval_model(self.model.module),
            parts.seed,
            parts.num_workers,
        )
        self.sampler = shard_sampler(self.sampler, self.fabric)
        self.loader = EpochLoader(self.splits.train, self.sampler, parts.num_workers, pin_memory=self._on_gpu())
        self.log = MetricsLog(self.folder.metrics, write=self.fabric.is_global_zero)
        if resume is not None:
            self._load_last()
            self.resumed_at = (self.state.step, self.state.elapsed)
            self._say(
                f"resuming from step {self.state.step} of {t.max_steps} ({self.folder.last_checkpoint.name}, "
                f"{self.state.elapsed:.0f} s trained before)"
            )
            if self.fabric.is_global_zero:
                record_resume(self.folder, *resume, environment, self.state.step)

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
            "callbacks": callback_states(self.callbacks),
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
        load_callback_states(self.callbacks, ckpt.get("callbacks", {}))  # absent from checkpoints of older versions
        loop = ckpt["loop"]
        self.state = LoopState(
            step=loop["step"], epoch=loop["epoch"], batch_in_epoch=loop["batch_in_epoch"], elapsed=loop["elapsed"]
        )
        self.log.truncate_after(self.state.step)
        self.state.history = [r for r in self.log.read() if r.get("split") == "val"]

    # ------------------------------------------------------------------ loop
    def fit(self) -> dict[str, Any]:
        if self.resuming and self.folder.summary.is_file():
            return self._already_finished()
        try:
            self._setup()
            t = self.train_cfg
            for cb in self.callbacks:
                cb.on_train_start(self)
            progress = TrainingProgress(
                total=t.max_steps, start=self.state.step, quiet=self.quiet or not self.fabric.is_global_zero
            )
            with StopSignals() as self.signals:  # SIGTERM/SIGINT: save last.pt, then stop
                with progress:
                    while self.state.step < t.max_steps and not self.stopper.should_stop:
                        self._run_epoch(progress)
                if self.signals.received:  # arrived after the last step's check
                    raise self._interrupted_in_test(self.signals.received)
                self.signals.stop_at_once = self._interrupted_in_test  # last.pt is the trained run: stop at once
                summary = self._finish()
                for cb in self.callbacks:
                    cb.on_train_end(self, summary)
                self.signals.stop_at_once = None  # the summary and plots are written whole
                self._write_summary(summary)
            return summary
        except RuntimeError as err:
            if self.fabric is None or self.fabric.world_size == 1 or not is_peer_failure(err):
                raise
            raise peer_lost(self.fabric.global_rank, self.state.step, self.folder, self.fabric.world_size) from err
        finally:
            self.loader = None  # its persistent workers stop
            self.folder.release()

    def _already_finished(self) -> dict[str, Any]:
        """``--resume`` of a finished run: nothing is trained, tested or written; its summary is returned."""
        self._launch()
        return finished_summary(self.folder, self.fabric.is_global_zero)

    def _on_gpu(self) -> bool:
        return self.fabric.device.type == "cuda"

    def _run_epoch(self, progress: TrainingProgress) -> None:
        t, s = self.train_cfg, self.state
        started = time.perf_counter()
        for images, labels in self.loader(s.epoch, s.batch_in_epoch):
            s.step += 1
            s.batch_in_epoch += 1
            outputs = self._train_step(images, labels)
            fault_point(f"step:{s.step}")
            s.elapsed += time.perf_counter() - started
            started = time.perf_counter()
            progress.advance(outputs["loss"])
            if s.step % t.log_every == 0:
                self.log.append(
                    {"split": "train", "step": s.step, "epoch": s.epoch, **outputs, "elapsed": round(s.elapsed, 3)}
                )
            if s.step % t.val_every == 0 or s.step == t.max_steps:
                score = self._validate()
                progress.show_validation(t.val_metric, score)
                started = time.perf_counter()
            self._stop_if_signalled()
            if s.step >= t.max_steps or self.stopper.should_stop:
                return
        s.epoch += 1
        s.batch_in_epoch = 0

    def _save(self, path: Path, state: dict[str, Any]) -> None:
        """Write a checkpoint from rank 0 only (every process holds the same state); never one with NaN or Inf."""
        self._check_finite_weights()
        if not self.fabric.is_global_zero:
            return
        try:
            save_checkpoint(path, state)
        except OSError as err:  # a full disk, a quota, a lost mount: the atomic write left the old file whole
            kept = "the previous one is kept whole" if path.is_file() else "none was written before"
            raise CheckpointWriteError(
                f"could not write {path.name} at step {self.state.step} ({err.strerror or err}); {kept}. Free space "
                f"in '{path.parent}' (a checkpoint takes about {estimate_checkpoint_bytes(self.parts.model, self.parts.objective, 2) // 2**20 + 1} MB), "
                f"then resume: {resume_command(self.folder, self.fabric.world_size)}"
            ) from err

    def _say(self, message: str) -> None:
        """One line on stderr of what the run is doing (rank 0, unless quiet): the long silent parts."""
        if not self.quiet and self.fabric.is_global_zero:
            print(f"dmlkit train: {message}", file=sys.stderr, flush=True)

    def _check_finite_weights(self) -> None:
        """Raise ``NonFiniteWeightsError`` when a weight or buffer of the model or the objective is NaN or Inf."""
        bad = non_finite_entries(self.model.state_dict()) + [
            f"objective {k}" for k in non_finite_entries(self.objective.state_dict())
        ]
        if bad:
            raise NonFiniteWeightsError(
                f"the weights became non-finite by step {self.state.step} (NaN or Inf in {', '.join(bad[:5])}"
                f"{' and more' if len(bad) > 5 else ''}); {kept_checkpoint(self.folder)}. "
                "Lower train.lr or set train.grad_clip, then resume or restart."
            )

    def _interrupted_in_test(self, signum: int) -> TrainingInterrupted:
        return TrainingInterrupted(signum, self.state.step, str(self.folder.path), during_test=True)

    def _stop_if_signalled(self) -> None:
        """After a step: on SIGTERM/SIGINT (on any process) write last.pt and raise ``TrainingInterrupted``."""
        received = signal_anywhere(self.fabric, self.signals.received or 0)  # every process stops after the same step
        if received:
            self._save(self.folder.last_checkpoint, self._checkpoint_state())
            self.fabric.barrier()
            raise TrainingInterrupted(received, self.state.step, str(self.folder.path))

    def _train_step(self, images: torch.Tensor, labels: torch.Tensor) -> dict[str, Any]:
        images, labels = self.fabric.to_device((images, labels))
        if self.train_cfg.channels_last:
            images = to_channels_last(images)
        self.model.train()
        embeddings, extras = self.parts.encode(self.model, images)
        batch = {"images": images, "labels": labels, "step": self.state.step, **extras, "extras": tuple(extras)}
        if embeddings.dtype in (torch.float16, torch.bfloat16):  # the objective runs in float32
            embeddings = embeddings.float()
        embeddings, labels = global_batch(self.fabric, embeddings, labels, batch)  # the objective sees the global batch
        total, terms = self.objective(embeddings, labels, batch)
        if not torch.isfinite(total):
            raise NonFiniteLossError(
                f"the loss became {float(total.detach())} at step {self.state.step} (terms: {terms}); "
                f"{kept_checkpoint(self.folder)}. Lower train.lr or set train.grad_clip, then resume or restart."
            )
        self.optimizer.zero_grad(set_to_none=True)
        self.fabric.backward(total)
        if self.train_cfg.grad_clip:
            self.fabric.clip_gradients(self.model, self.optimizer, max_norm=self.train_cfg.grad_clip)
        self.optimizer.step()
        if self.scheduler is not None and self.train_cfg.schedule == "step":
            self.scheduler.step()
        outputs = {
            "loss": float(total.detach()),
            **({f"loss/{k}": v for k, v in terms.items()} if len(terms) > 1 else {}),
        }
        outputs["lr"] = self.optimizer.param_groups[0]["lr"]
        for cb in self.callbacks:
            cb.on_batch_end(self, batch, outputs)
        return outputs

    # ------------------------------------------------------------ validation
    def eval_model(self) -> nn.Module:
        """The module evaluated (the embedder, a method's view of it, or a classifier's outputs)."""
        return self.parts.eval_model(self.model)

    def evaluate(self, dataset: Any, with_clustering: bool = False, reference: Any = None) -> dict[str, float]:
        """Retrieval (and clustering) metrics of ``dataset`` within itself, or as queries against ``reference``
        (engine/evaluator.py: with several processes each scores its shards; the values are one process's)."""
        return self.evaluator.evaluate(dataset, with_clustering, reference)

    def _validate(self) -> float:
        t, s = self.train_cfg, self.state
        self._check_finite_weights()  # NaN weights would make NaN embeddings
        metrics = self.evaluate(self.splits.val, reference=self.splits.reference if self.splits.val_is_test else None)
        score = validation_score(metrics, t.val_metric, s.step, self.splits.val)  # val_metric checked in __init__
        improved = self.stopper.update(score, s.step)
        if self.scheduler is not None and t.schedule == "plateau":
            self.scheduler.step(score)
        record = {"split": "val", "step": s.step, "epoch": s.epoch, **metrics, "best": improved}
        self.log.append(record)
        s.history.append(record)
        if improved:
            self._save(
                self.folder.best_checkpoint,
                {
                    "model": self.model.state_dict(),
                    "objective": self.objective.state_dict(),
                    "step": s.step,
                    "metrics": metrics,
                },
            )
        self._save(self.folder.last_checkpoint, self._checkpoint_state())
        for cb in self.callbacks:
            cb.on_validation_end(self, metrics)
        return score

    # ----------------------------------------------------------------- finish
    def restore_best(self) -> None:
        """Load ``best.pt``'s model and objective state (when there is one) into the running model and objective."""
        if self.folder.best_checkpoint.is_file():
            best = load_checkpoint(self.folder.best_checkpoint)
            load_model_state(self.model, best["model"], str(self.folder.best_checkpoint))
            self.objective.load_state_dict(best["objective"])

    def _finish(self) -> dict[str, Any]:
        """Test metrics of the best weights; returns the summary (written after the callbacks' ``on_train_end``)."""
        self.fabric.barrier()  # rank 0 has written best.pt
        fault_point("final_test")
        self.restore_best()
        test: dict[str, float] = {}
        if self.eval_cfg.test:
            self._say(
                f"testing the best weights (step {self.stopper.best_step}) on {len(self.splits.test)} test images"
            )
            test, embeddings, labels = self.evaluator.test(
                self.splits.test, self.splits.reference, keep_embeddings=self.plots
            )
            self.log.append({"split": "test", "step": self.state.step, **test})
            self._test_embeddings = (embeddings, labels)
        return {
            "name": self.parts.name,
            "seed": self.parts.seed,
            "steps": self.state.step,
            "stopped_early": self.stopper.should_stop,
            "best_step": self.stopper.best_step,
            "best_val": {"metric": self.train_cfg.val_metric, "value": self.stopper.best_score},
            "validated_on_test": self.splits.val_is_test,
            "train_seconds": round(self.state.elapsed, 2),
            "test": test,
            "num_parameters": sum(p.numel() for p in self.model.parameters()),
        }

    def _write_summary(self, summary: dict[str, Any]) -> None:
        if self.fabric.is_global_zero:  # only rank 0 writes the run folder
            write_json_atomic(self.folder.summary, summary)
            if self.plots:
                self._say(f"drawing the plots into {self.folder.plots}")
                self._plot(*self._test_embeddings)

    def _plot(self, embeddings: torch.Tensor, labels: torch.Tensor) -> None:
        from dmlkit.viz import plots

        self.folder.plots.mkdir(exist_ok=True)
        plots.training_curves(self.log.read(), self.folder.plots / "training_curves.png")
        if embeddings is None:  # not tested (eval.test: false)
            return
        plots.embedding_projection(embeddings, labels, self.folder.plots / "test_embeddings_pca.png")
        plots.distance_histogram(embeddings, labels, self.folder.plots / "test_distances.png", seed=self.parts.seed)
