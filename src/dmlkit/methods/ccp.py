"""CCP as a training method: proxies, the projection term and alternating projections (Algorithm 1 of the thesis).

``methods.ccp.enabled`` turns it on (the section is ``CCPConfig``, ``dmlkit.proxies.config``).
The components live in ``dmlkit.proxies``; this method plugs them
into a run through its hooks:

* ``wrap_loss``: the metric loss becomes ``ProxyPairLoss`` against a ``ProxyBank`` (Eq. 3.2.11, data
  term; ``methods.ccp.proxy_anchor``: the proxies are the anchors);
* ``terms``: ``batch`` = ``methods.ccp.batch_loss_weight * L(batch, batch)`` (the official code's extra
  batch-pair term, 0.1 there; absent from the thesis text) and ``projection`` =
  ``lam/2 ||theta - theta*||^2`` (Eq. 3.2.11);
* ``param_groups``: the proxies learn at ``(train.loss_lr or train.lr) * methods.ccp.proxy_lr_mult``, without
  weight decay (``ProxyBank.no_weight_decay``);
* ``ProjectionStopping`` (``stopper``): two early stoppings. A projection ends after ``methods.ccp.patience``
  validations without improving *that projection's* best score (thesis Sec. 3.2.4: patience 3 on
  validation MAP@R); the run ends after ``train.patience`` validations without improving *the run's*
  best score, counted across projections (thesis Sec. 3.3.2.1: 60 / 15 / 40 by protocol; the
  official code's ``training.early_stopping_patience``), or at ``train.max_steps``.
  ``methods.ccp.max_projections`` caps the projections: the last one is not ended by ``methods.ccp.patience``
  (so Loss-Proxy, ``max_projections: 1``, stops exactly like its baseline).
* ``CCPCallback`` (``callbacks``): at every validation that is the running projection's best, keeps
  ``theta`` and the proxies (``remember``). When a projection ends: ``theta* <-`` that best
  ``theta``, ``rho* <-`` those best proxies, and the network trains on from its *current* weights
  (the official ``AlternatingProjectionCallback``; ``methods.ccp.restore_best: true`` instead rolls the
  network and proxies back to the run's ``best.pt`` first); then a pool
  of ``pool_size`` training samples per class is embedded with the current network and the proxies
  are re-initialised with greedy k-centre picks measured from ``rho*`` in the pool's space
  (Algorithm 2); the proxies' optimiser state is cleared. ``lam`` is
  ``methods.ccp.first_projection_lambda`` during the first projection (official: 0) and ``methods.ccp.lam`` after.
  It logs one ``{"split": "ccp", ...}`` record per projection (steps it took, Fig. 3.7b, and the
  covering radius / inter-class distance of the pool, Sec. 3.3.1) and adds a ``ccp`` entry to the
  run summary.

The first projection starts from the initial weights (``theta*`` = the initialisation) and from
proxies picked by greedy k-centre in a random pool with no previous proxies (the first pick of
each class is a random sample, Algorithm 1 "initialize rho* with random samples").

Resume: a projection that ended at step ``s`` is saved in ``last.pt`` as *pending* and rolled
forward on resume; the remembered best state (buffers of the objective) is in every checkpoint
written after the validation that set it, and a run resumed from the ``last.pt`` of that very
validation remembers it again from the loaded weights. So a resumed run ends as the uninterrupted one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils.data import Subset

from dmlkit.engine.callbacks import Callback, TrainerView
from dmlkit.engine.config import TrainConfig
from dmlkit.engine.early_stopping import EarlyStopping
from dmlkit.engine.embed import embed_dataset
from dmlkit.engine.objective import MetricLossTerm, ObjectiveTerm
from dmlkit.methods.base import BuildContext, Method
from dmlkit.methods.registry import register_method
from dmlkit.proxies.bank import ProxyBank, ProxyPairLoss, group_by_class
from dmlkit.proxies.config import CCPConfig
from dmlkit.proxies.diagnostics import embedding_geometry
from dmlkit.proxies.kcenter import sample_class_pool, select_per_class
from dmlkit.proxies.projection import ProjectionRegularizer

if TYPE_CHECKING:
    from dmlkit.config import ExperimentConfig

__all__ = ["CCP", "CCPCallback", "ProjectionStopping", "ProjectionTerm"]


class ProjectionTerm(ObjectiveTerm):
    """``lam/2 ||theta - theta*||^2`` as an objective term named ``projection``."""

    def __init__(self, regularizer: ProjectionRegularizer, name: str = "projection") -> None:
        super().__init__(name)
        self.regularizer = regularizer

    def value(self, embeddings: torch.Tensor, labels: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        return self.regularizer().to(embeddings.device)


@dataclass
class ProjectionStopping(EarlyStopping):
    """The two early stoppings of Algorithm 1: one per projection, one for the run.

    ``patience``, ``best_score``, ``best_step``, ``bad_validations`` (of ``EarlyStopping``) are the
    run's: ``should_stop`` once ``patience`` validations pass without a new best of the run, across
    projections. ``projection_patience`` validations without a new best of the running projection
    end it (``pending`` until the callback starts the next one), unless it is the last one that
    ``max_projections`` allows or the run stops at the same validation.
    """

    projection_patience: int = 3
    max_projections: int | None = None
    started: bool = False
    projection: int = 0
    projection_start: int = 0
    projection_best: float = -math.inf
    projection_best_step: int = -1
    projection_bad: int = 0
    start_score: float = -math.inf
    pending: bool = False
    projections: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.projection_patience < 1:
            raise ValueError(f"projection patience must be at least 1 validation, got {self.projection_patience}")

    def begin_projection(self, step: int) -> None:
        """Start the next projection problem at ``step`` (the first one when none has started)."""
        if self.started:
            self.projection += 1
        self.started, self.pending = True, False
        self.projection_start, self.projection_best, self.projection_best_step = step, -math.inf, -1
        self.projection_bad, self.start_score = 0, self.best_score

    @property
    def last_projection(self) -> bool:
        return self.max_projections is not None and self.projection + 1 >= self.max_projections

    def update(self, score: float, step: int) -> bool:
        """Record a validation score; True when it is a new best of the run."""
        improved = super().update(score, step)
        if score > self.projection_best:
            self.projection_best, self.projection_best_step, self.projection_bad = score, step, 0
        else:
            self.projection_bad += 1
        if self.projection_bad >= self.projection_patience and not self.last_projection and not self.should_stop:
            self.projections.append(self._record(step, "patience"))
            self.pending = True
        return improved

    def close(self, step: int) -> None:
        """The run ended at ``step``: record the running projection (once)."""
        if self.started and not self.pending and not any(p["projection"] == self.projection for p in self.projections):
            self.projections.append(self._record(step, "run"))

    def _record(self, step: int, ended_by: str) -> dict:
        return {
            "projection": self.projection,
            "start_step": self.projection_start,
            "end_step": step,
            "steps": step - self.projection_start,
            "best_step": self.projection_best_step,
            "steps_to_best": self.projection_best_step - self.projection_start,
            "best": self.projection_best,
            "improved": self.projection_best > self.start_score,
            "ended_by": ended_by,
        }


def _plain(dataset: Any) -> Any:
    return dataset.with_augment(False) if hasattr(dataset, "with_augment") else dataset


class CCPCallback(Callback):
    """Runs Algorithm 1 around the Trainer's loop (see the module docstring)."""

    def __init__(
        self,
        cfg: CCPConfig,
        bank: ProxyBank,
        regularizer: ProjectionRegularizer,
        train_set: Any,
        seed: int,
        batch_size: int,
        max_steps: int | None = None,
    ) -> None:
        self.cfg, self.bank, self.regularizer, self.max_steps = cfg, bank, regularizer, max_steps
        self.train_set, self.seed, self.batch_size = train_set, seed, batch_size
        self.last_pool: tuple[torch.Tensor, torch.Tensor] | None = None
        self.panels: list[dict] = []  # methods.ccp.plot: one figure panel per projection end (kept in last.pt)

    # ------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """The figure panels of the projections ended so far: a resumed run's figure shows every projection.

        ``last.pt`` is written before the validation hooks, so a projection that ends at that validation is rolled
        forward again on resume, which adds its panel then."""
        return {"panels": list(self.panels)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.panels = list(state["panels"])

    # ------------------------------------------------------------- hooks
    def on_train_start(self, trainer: TrainerView) -> None:
        stopper = trainer.stopper
        if not stopper.started:
            self._start_projection(trainer, initial=None, first=True)
        elif stopper.pending:
            if not self._budget_spent(trainer):
                self._roll_forward(trainer)
        else:  # resumed inside a projection
            self._set_lambda(stopper.projection)
            if stopper.projection_best_step == trainer.state.step:  # last.pt of that validation: before remember()
                self._remember()

    def on_validation_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        stopper = trainer.stopper
        if stopper.projection_best_step == trainer.state.step:
            self._remember()
        if stopper.pending and not self._budget_spent(trainer):
            self._roll_forward(trainer)

    def on_train_end(self, trainer: TrainerView, summary: dict[str, Any]) -> None:
        stopper = trainer.stopper
        stopper.close(trainer.state.step)
        self._log_projection(trainer, stopper.projections[-1], {})
        summary["ccp"] = {
            "projections": stopper.projection + 1,
            "steps_per_projection": [p["steps"] for p in stopper.projections],
            "steps_to_best_per_projection": [p["steps_to_best"] for p in stopper.projections],
            "best_per_projection": [p["best"] for p in stopper.projections],
            "ended_by": [p["ended_by"] for p in stopper.projections],
        }
        summary.setdefault("facts", {})["projections"] = summary["ccp"]["projections"]  # a protocol-table column
        self._embed_pool(trainer, stopper.projection + 1)  # the final (best) network's geometry
        summary["ccp"].update(self._pool_geometry())  # the trainer writes the summary after this hook
        if trainer.fabric.is_global_zero and self.cfg.plot and trainer.plots:
            self._plot(trainer)

    # ------------------------------------------------------------ projections
    def _budget_spent(self, trainer: TrainerView) -> bool:
        """The step budget is spent: a projection that ends now starts no next one."""
        return self.max_steps is not None and trainer.state.step >= self.max_steps

    def _remember(self) -> None:
        """The running projection's best state: ``theta_best <- theta``, ``rho_star <- rho``."""
        self.regularizer.remember()
        self.bank.remember()

    def _set_lambda(self, projection: int) -> None:
        self.regularizer.lam = float(self.cfg.first_projection_lambda if projection == 0 else self.cfg.lam)

    def _roll_forward(self, trainer: TrainerView) -> None:
        """theta* and rho* <- the best state of the projection that just ended; start the next one."""
        ended = trainer.stopper.projections[-1]
        if self.cfg.restore_best:  # the network and proxies go back to best.pt
            trainer.fabric.barrier()  # several processes: rank 0 has written best.pt
            trainer.restore_best()
            self.regularizer.snapshot()
            initial = None
        else:  # official: only the anchors move; the network keeps its current weights
            self.regularizer.snapshot(from_best=True)
            initial = self.bank.rho_star.clone()
        converged = self.bank.per_class(initial).reshape(-1, self.bank.dim).cpu()  # rho* as the loss sees it
        self._start_projection(trainer, initial=initial, first=False)
        if self.cfg.plot and trainer.fabric.is_global_zero and trainer.plots:
            self.panels.append(
                self._panel(
                    trainer,
                    converged,
                    self.bank.reference().detach().cpu(),
                    f"projection {ended['projection']} (best MAP@R {ended['best']:.3f})",
                )
            )
        self._log_projection(trainer, ended, self._pool_geometry())

    def _start_projection(self, trainer: TrainerView, initial: torch.Tensor | None, first: bool) -> None:
        stopper = trainer.stopper
        stopper.begin_projection(trainer.state.step)
        self._set_lambda(stopper.projection)
        if first:
            self.regularizer.snapshot()
        embeddings, labels = self._embed_pool(trainer, stopper.projection)
        self.bank.reinitialize(embeddings, labels, from_current=self.cfg.from_current and not first, initial=initial)
        if first:
            self._remember()
        inner = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
        inner.state.pop(self.bank.proxies, None)

    def _embed_pool(self, trainer: TrainerView, projection: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``pool_size`` random training samples per class (seeded by run seed and projection), embedded."""
        train = self.train_set
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + projection)
        pool = sample_class_pool(train.labels, self.bank.num_classes, self.cfg.pool_size, generator=g)
        idx = pool[pool >= 0]
        embeddings, labels = embed_dataset(
            trainer.model, Subset(_plain(train), idx.tolist()), self.batch_size, trainer.fabric.device
        )
        self.last_pool = (embeddings, labels)
        return embeddings, labels

    def _pool_geometry(self) -> dict[str, float]:
        """Covering radius and inter-class distance (Sec. 3.3.1) of the last embedded pool."""
        if self.last_pool is None or torch.unique(self.last_pool[1]).numel() < 2:
            return {}
        return {f"pool_{k}": v for k, v in embedding_geometry(*self.last_pool).items()}

    def _log_projection(self, trainer: TrainerView, record: dict[str, Any], geometry: dict[str, float]) -> None:
        """Append the record of a finished projection to the metrics log, once.

        ``geometry``: of the pool embedded with the projection's solution (empty for the last one).
        """
        done = {r.get("projection") for r in trainer.log.read() if r.get("split") == "ccp"}
        if record["projection"] not in done:
            trainer.log.append({"split": "ccp", "step": record["end_step"], **record, **geometry})

    # -------------------------------------------------------------------- plot
    def _panel(self, trainer: TrainerView, converged: torch.Tensor, nxt: torch.Tensor | None, title: str) -> dict:
        """Samples of the first 20 training classes (current network), converged and next proxies of those classes."""
        train = _plain(self.train_set)
        keep = torch.nonzero(train.labels < 20).flatten()
        samples, labels = embed_dataset(
            trainer.model, Subset(train, keep.tolist()), self.batch_size, trainer.fabric.device
        )
        proxy_labels = self.bank.labels.cpu()
        shown = proxy_labels < 20
        return {
            "samples": samples,
            "labels": labels,
            "converged": converged[shown],
            "converged_labels": proxy_labels[shown],
            "next": None if nxt is None else nxt[shown],
            "next_labels": proxy_labels[shown],
            "title": title,
        }

    def _plot(self, trainer: TrainerView) -> None:
        """``plots/ccp_proxies.png``: one panel per finished projection (converged proxies = its rho*, next = the
        k-centre picks that started the next one), and the final network with its proxies and their next picks."""
        from dmlkit.viz.proxies import proxy_panels

        bank = self.bank
        pool_emb, pool_labels = self.last_pool or self._embed_pool(trainer, trainer.stopper.projection + 1)
        pool, mask, rows = group_by_class(pool_emb, pool_labels, bank.num_classes)
        picks = select_per_class(pool, mask, bank.proxies_per_class, bank.in_pool_space().cpu())
        nxt = pool_emb[torch.gather(rows, 1, picks).flatten()]
        final = self._panel(trainer, bank.reference().detach().cpu(), nxt, "final (best weights)")
        trainer.folder.plots.mkdir(exist_ok=True)
        proxy_panels([*self.panels, final], trainer.folder.plots / "ccp_proxies.png")


@register_method("ccp", settings=CCPConfig)
class CCP(Method):
    """Chance-constrained programming (``methods.ccp`` section; thesis Ch. 3, Algorithm 1)."""

    name = "ccp"

    def __init__(self, cfg: "ExperimentConfig") -> None:
        self.cfg: CCPConfig = cfg.methods.ccp
        self.batch_size, self.max_steps = cfg.eval.batch_size, cfg.train.max_steps
        self.bank: ProxyBank | None = None
        self.regularizer: ProjectionRegularizer | None = None
        self.ctx: BuildContext | None = None
        self.loss: nn.Module | None = None
        self.miner: nn.Module | None = None
        self._stopper: ProjectionStopping | None = None

    @classmethod
    def from_config(cls, cfg: "ExperimentConfig") -> "CCP | None":
        return cls(cfg) if cfg.methods.ccp.active else None

    def setup(self, ctx: BuildContext) -> None:
        cfg, counts = self.cfg, ctx.class_counts
        if bool((counts < cfg.proxies_per_class).any()):
            c = int(counts.argmin())
            raise ValueError(
                f"methods.ccp.proxies_per_class={cfg.proxies_per_class} but training class {c} has only {int(counts[c])} samples; "
                f"the proxies are picked among a class's samples: set methods.ccp.proxies_per_class <= {int(counts.min())}"
            )
        self.ctx = ctx
        self.bank = ProxyBank(
            ctx.num_classes,
            cfg.proxies_per_class,
            ctx.embedding_dim,
            normalize=cfg.proxy_normalize,
            seed=ctx.seed,
            pool_normalize=ctx.cfg.model.normalize,
        )
        self.regularizer = ProjectionRegularizer(ctx.model, cfg.first_projection_lambda)

    def wrap_loss(self, loss: nn.Module, miner: nn.Module | None) -> tuple[nn.Module, nn.Module | None]:
        """The pair loss against the proxies (Eq. 3.2.11); the miner runs inside it (batch vs proxies)."""
        self.loss, self.miner = loss, miner
        return ProxyPairLoss(loss, self.bank, miner, proxy_anchor=self.cfg.proxy_anchor), None

    def terms(self, terms: list[ObjectiveTerm]) -> list[ObjectiveTerm]:
        """``+ w * L(batch, batch)`` (named ``batch``, when ``methods.ccp.batch_loss_weight > 0``) ``+ lam/2 ||theta - theta*||^2``."""
        w = float(self.cfg.batch_loss_weight)
        batch = [MetricLossTerm(self.loss, self.miner, weight=w, name="batch")] if w > 0 else []
        return [*terms, *batch, ProjectionTerm(self.regularizer)]

    def param_groups(self, train: TrainConfig) -> list[dict]:
        mult = float(self.cfg.proxy_lr_mult)
        return [{"name": f"loss_x{mult:g}", "params": [self.bank.proxies], "lr": (train.loss_lr or train.lr) * mult}]

    def stopper(self, train: TrainConfig) -> EarlyStopping:
        """Projections end on ``methods.ccp.patience``, the run on ``train.patience`` (one object per run)."""
        if self._stopper is None:
            self._stopper = ProjectionStopping(
                patience=train.patience, projection_patience=self.cfg.patience, max_projections=self.cfg.max_projections
            )
        return self._stopper

    def callbacks(self) -> list[Callback]:
        return [
            CCPCallback(
                self.cfg,
                self.bank,
                self.regularizer,
                self.ctx.train_set,
                self.ctx.seed,
                self.batch_size,
                self.max_steps,
            )
        ]
