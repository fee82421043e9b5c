"""CCP as a training method: proxies, the projection term and alternating projections (Algorithm 1 of the thesis).

``ccp.enabled`` turns it on. The components live in ``dmlkit.proxies``; this method plugs them
into a run through its hooks:

* ``wrap_loss``: the metric loss becomes ``ProxyPairLoss`` against a ``ProxyBank`` (Eq. 3.2.11, data term);
* ``param_groups``: the proxies learn at ``(train.loss_lr or train.lr) * ccp.proxy_lr_mult``;

* ``ProjectionTerm``: the objective term ``lam/2 ||theta - theta*||^2`` (Eq. 3.2.11);
* ``ProjectionStopping`` (``stopper``): replaces the trainer's early stopping.  Each projection ends
  when ``ccp.patience`` validations pass without improving *that projection's* best
  score (thesis Sec. 3.2.4: patience 3 on validation MAP@R); the run ends when a
  projection ends without improving the best score of the run (or after
  ``ccp.max_projections``).  Its state is saved in every checkpoint.
* ``CCPCallback`` (``callbacks``): starts each projection -- restore the best weights and proxies of
  the projection that just ended (``theta* <- theta``, ``rho* <- rho``), snapshot
  ``theta*``, embed a pool of ``pool_size`` training samples per class with the current
  network and re-initialise the proxies with greedy k-centre picks measured from the
  converged proxies (Algorithm 2); the proxies' optimiser state is cleared.  It logs one
  ``{"split": "ccp", ...}`` record per finished projection (steps it took, Fig. 3.7b,
  and the covering radius / inter-class distance of the pool, Sec. 3.3.1) and adds a
  ``ccp`` entry to the run summary.

The first projection starts from the initial weights (``theta*`` = the random
initialisation, as in Algorithm 1) and from proxies picked by greedy k-centre in a random
pool with no previous proxies (the first pick of each class is a random sample).

Resume: a projection that ended at step ``s`` is saved in ``last.pt`` as *pending*;
the roll-forward is a pure function of ``best.pt``, the stopper state and the seed, so a
run resumed from ``s`` rolls forward exactly as the uninterrupted one did.
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
from dmlkit.engine.objective import ObjectiveTerm
from dmlkit.methods.base import BuildContext, Method
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
    """Early stopping of Algorithm 1: per projection (``patience`` validations) and for the run.

    ``best_score`` / ``best_step`` are the run's best (what ``best.pt`` holds);
    ``bad_validations`` counts validations since the current projection's best.
    """

    max_projections: int | None = None
    started: bool = False
    projection: int = 0
    projection_start: int = 0
    projection_best: float = -math.inf
    projection_best_step: int = -1
    start_score: float = -math.inf
    pending: bool = False
    finished: bool = False
    projections: list[dict] = field(default_factory=list)

    def begin_projection(self, step: int) -> None:
        """Start the next projection problem at ``step`` (the first one when none has started)."""
        if self.started:
            self.projection += 1
        self.started, self.pending = True, False
        self.projection_start, self.projection_best, self.projection_best_step = step, -math.inf, -1
        self.bad_validations, self.start_score = 0, self.best_score

    def update(self, score: float, step: int) -> bool:
        """Record a validation score; True when it is a new best of the run."""
        if not math.isfinite(score):
            raise ValueError(f"validation score at step {step} is {score}; the embeddings diverged")
        improved = score > self.best_score
        if improved:
            self.best_score, self.best_step = score, step
        if score > self.projection_best:
            self.projection_best, self.projection_best_step, self.bad_validations = score, step, 0
        else:
            self.bad_validations += 1
        if self.bad_validations >= self.patience:
            self._end_projection(step)
        return improved

    def _end_projection(self, step: int) -> None:
        gained = self.projection_best > self.start_score
        self.projections.append({
            "projection": self.projection,
            "start_step": self.projection_start,
            "end_step": step,
            "steps": step - self.projection_start,
            "best_step": self.projection_best_step,
            "steps_to_best": self.projection_best_step - self.projection_start,
            "best": self.projection_best,
            "improved": gained,
        })
        more = self.max_projections is None or self.projection + 1 < self.max_projections
        self.pending = gained and more
        self.finished = not self.pending

    @property
    def should_stop(self) -> bool:
        return self.finished


def _plain(dataset: Any) -> Any:
    return dataset.with_augment(False) if hasattr(dataset, "with_augment") else dataset


class CCPCallback(Callback):
    """Runs Algorithm 1 around the Trainer's loop (see the module docstring)."""

    def __init__(
        self, cfg: CCPConfig, bank: ProxyBank, regularizer: ProjectionRegularizer, train_set: Any, seed: int,
        batch_size: int,
    ) -> None:
        self.cfg, self.bank, self.regularizer = cfg, bank, regularizer
        self.train_set, self.seed, self.batch_size = train_set, seed, batch_size
        self.last_pool: tuple[torch.Tensor, torch.Tensor] | None = None

    # ------------------------------------------------------------- hooks
    def on_train_start(self, trainer: TrainerView) -> None:
        stopper = trainer.stopper
        if not stopper.started:
            self._start_projection(trainer, first=True)
        elif stopper.pending:
            self._roll_forward(trainer)

    def on_validation_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        stopper = trainer.stopper
        if stopper.pending:
            self._roll_forward(trainer)
        elif stopper.finished:
            self._log_projection(trainer, stopper.projections[-1], {})

    def on_train_end(self, trainer: TrainerView, summary: dict[str, Any]) -> None:
        stopper = trainer.stopper
        summary["ccp"] = {
            "projections": stopper.projection + 1,
            "finished_projections": len(stopper.projections),
            "steps_per_projection": [p["steps"] for p in stopper.projections],
            "steps_to_best_per_projection": [p["steps_to_best"] for p in stopper.projections],
            "best_per_projection": [p["best"] for p in stopper.projections],
        }
        self._embed_pool(trainer, stopper.projection + 1)  # the final (best) network's geometry
        summary["ccp"].update(self._pool_geometry())  # the trainer writes the summary after this hook
        if trainer.fabric.is_global_zero and self.cfg.plot and trainer.plots:
            self._plot(trainer)

    # ------------------------------------------------------------ projections
    def _roll_forward(self, trainer: TrainerView) -> None:
        """theta* and rho* <- the best weights and proxies of the projection that just ended; start the next."""
        ended = trainer.stopper.projections[-1]
        trainer.fabric.barrier()  # several processes: rank 0 has written best.pt
        trainer.restore_best()
        self._start_projection(trainer, first=False)
        self._log_projection(trainer, ended, self._pool_geometry())

    def _start_projection(self, trainer: TrainerView, first: bool) -> None:
        stopper = trainer.stopper
        stopper.begin_projection(trainer.state.step)
        self.regularizer.snapshot()
        embeddings, labels = self._embed_pool(trainer, stopper.projection)
        self.bank.reinitialize(embeddings, labels, from_current=self.cfg.from_current and not first)
        inner = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
        inner.state.pop(self.bank.proxies, None)

    def _embed_pool(self, trainer: TrainerView, projection: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``pool_size`` random training samples per class (seeded by run seed and projection), embedded."""
        train = self.train_set
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + projection)
        pool = sample_class_pool(train.labels, self.bank.num_classes, self.cfg.pool_size, generator=g)
        idx = pool[pool >= 0]
        embeddings, labels = embed_dataset(trainer.model, Subset(_plain(train), idx.tolist()), self.batch_size,
                                           trainer.fabric.device)
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
    def _plot(self, trainer: TrainerView) -> None:
        from dmlkit.viz.proxies import proxy_figure

        train = _plain(self.train_set)
        keep = torch.nonzero(train.labels < 20).flatten()
        samples, labels = embed_dataset(trainer.model, Subset(train, keep.tolist()), self.batch_size, trainer.fabric.device)
        bank = self.bank
        converged = bank.reference().detach().cpu()
        pool_emb, pool_labels = self.last_pool or self._embed_pool(trainer, trainer.stopper.projection + 1)
        pool, mask, rows = group_by_class(pool_emb, pool_labels, bank.num_classes)
        picks = select_per_class(pool, mask, bank.proxies_per_class, bank.per_class().cpu())
        nxt = pool_emb[torch.gather(rows, 1, picks).flatten()]
        shown = bank.labels.cpu() < 20
        trainer.folder.plots.mkdir(exist_ok=True)
        proxy_figure(samples, labels, converged[shown], bank.labels.cpu()[shown], nxt[shown], bank.labels.cpu()[shown],
                     trainer.folder.plots / "ccp_proxies.png")


class CCP(Method):
    """Chance-constrained programming (``ccp:`` section; thesis Ch. 3, Algorithm 1)."""

    name = "ccp"

    def __init__(self, cfg: "ExperimentConfig") -> None:
        self.cfg: CCPConfig = cfg.ccp
        self.batch_size = cfg.eval.batch_size
        self.bank: ProxyBank | None = None
        self.regularizer: ProjectionRegularizer | None = None
        self.ctx: BuildContext | None = None
        self._stopper = ProjectionStopping(patience=self.cfg.patience, max_projections=self.cfg.max_projections)

    @classmethod
    def from_config(cls, cfg: "ExperimentConfig") -> "CCP | None":
        return cls(cfg) if cfg.ccp.enabled else None

    def setup(self, ctx: BuildContext) -> None:
        cfg, counts = self.cfg, ctx.class_counts
        if bool((counts < cfg.proxies_per_class).any()):
            c = int(counts.argmin())
            raise ValueError(
                f"ccp.proxies_per_class={cfg.proxies_per_class} but training class {c} has only {int(counts[c])} samples; "
                f"the proxies are picked among a class's samples: set ccp.proxies_per_class <= {int(counts.min())}"
            )
        self.ctx = ctx
        self.bank = ProxyBank(ctx.num_classes, cfg.proxies_per_class, ctx.embedding_dim, normalize=cfg.proxy_normalize,
                              seed=ctx.seed)
        self.regularizer = ProjectionRegularizer(ctx.model, cfg.lam)

    def wrap_loss(self, loss: nn.Module, miner: nn.Module | None) -> tuple[nn.Module, nn.Module | None]:
        """The pair loss against the proxies (Eq. 3.2.11); the miner runs inside it (batch vs proxies)."""
        return ProxyPairLoss(loss, self.bank, miner), None

    def terms(self, terms: list[ObjectiveTerm]) -> list[ObjectiveTerm]:
        return [*terms, ProjectionTerm(self.regularizer)]

    def param_groups(self, train: TrainConfig) -> list[dict]:
        mult = float(self.cfg.proxy_lr_mult)
        return [{"name": f"loss_x{mult:g}", "params": [self.bank.proxies], "lr": (train.loss_lr or train.lr) * mult}]

    def stopper(self, train: TrainConfig) -> EarlyStopping:
        return self._stopper

    def callbacks(self) -> list[Callback]:
        return [CCPCallback(self.cfg, self.bank, self.regularizer, self.ctx.train_set, self.ctx.seed, self.batch_size)]
