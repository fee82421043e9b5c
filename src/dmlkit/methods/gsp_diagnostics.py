"""GSP diagnostics as a training method: did the pooling select anything?

On for every run whose pooling declares ``reports_selection_entropy`` (GSP: ``model.pooling: gsp`` or
``gsp_gmp``). After each training
step it adds to the step's logged record (``metrics.jsonl``) the batch mean of the entropy of the
pooling weights ``w_j = (1/n - rho_j)/mu`` (Eq. 5.2.1), ``gsp/entropy``, and the effective number of
pooled features ``gsp/effective_features = exp(H)``; GAP is ``log n`` and ``n``. At the end the
summary gets ``gsp``: the last logged values, their mean over the last quarter of the run, the
references ``entropy_gap = log n`` and ``entropy_topk = log(mu n)`` (a hard selection of a fraction
``mu``), and, for k-centre prototypes, the step at which the GAP warm-up ended
(``kcenter_step``; ``null`` when it never ended). See ``dmlkit.pooling.gsp_diagnostics``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dmlkit.engine.callbacks import Callback, TrainerView
from dmlkit.methods.base import BuildContext, Method
from dmlkit.methods.registry import register_method
from dmlkit.pooling.gsp_diagnostics import weight_summary
from dmlkit.pooling.registry import list_poolings, pooling_factory

if TYPE_CHECKING:
    from dmlkit.config import ExperimentConfig

__all__ = ["GSPDiagnostics", "PoolingEntropyLog"]


class PoolingEntropyLog(Callback):
    """Adds ``gsp/entropy`` and ``gsp/effective_features`` to each step's record; ``gsp`` to the summary."""

    def __init__(self, pooling: Any) -> None:
        self.pooling = pooling
        self.history: list[tuple[int, float, float]] = []  # (step, entropy, effective features)
        self.kcenter_step: int | None = None
        self.last: dict[str, float] = {}

    def on_batch_end(self, trainer: TrainerView, batch: dict[str, Any], outputs: dict[str, Any]) -> None:
        entropy = getattr(self.pooling, "last_entropy", None)
        if entropy is None:
            return
        n = int(self.pooling.last_features)
        self.last = weight_summary(entropy.detach().float().cpu(), n, float(self.pooling.mu))
        outputs["gsp/entropy"] = round(self.last["entropy"], 6)
        outputs["gsp/effective_features"] = round(self.last["effective_features"], 4)
        self.history.append((trainer.state.step, self.last["entropy"], self.last["effective_features"]))
        if (
            self.kcenter_step is None
            and getattr(self.pooling, "init", "random") == "kcenter"
            and not self.pooling.pools_with_gap
        ):
            self.kcenter_step = trainer.state.step

    def state_dict(self) -> dict[str, Any]:
        """The history and the k-centre step: a resumed run's summary covers the whole run, not its continuation."""
        return {"history": list(self.history), "kcenter_step": self.kcenter_step, "last": dict(self.last)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [tuple(h) for h in state["history"]]
        self.kcenter_step = state["kcenter_step"]
        self.last = dict(state["last"])

    def on_train_end(self, trainer: TrainerView, summary: dict[str, Any]) -> None:
        if not self.history:
            return
        tail = self.history[-max(1, len(self.history) // 4) :]
        summary["gsp"] = {
            **{k: round(v, 6) for k, v in self.last.items()},
            "entropy_last_quarter": round(sum(h for _, h, _ in tail) / len(tail), 6),
            "effective_features_last_quarter": round(sum(e for _, _, e in tail) / len(tail), 4),
            "init": getattr(self.pooling, "init", "random"),
            "kcenter_step": self.kcenter_step,
        }


@register_method("gsp_diagnostics")
class GSPDiagnostics(Method):
    """Logs the entropy of GSP's pooling weights (see the module docstring)."""

    name = "gsp_diagnostics"

    def __init__(self) -> None:
        self.callback: PoolingEntropyLog | None = None

    @classmethod
    def from_config(cls, cfg: "ExperimentConfig") -> "GSPDiagnostics | None":
        if cfg.model.pooling not in list_poolings():
            return None  # a pooling the config check reports; nothing to log
        return cls() if getattr(pooling_factory(cfg.model.pooling), "reports_selection_entropy", False) else None

    def setup(self, ctx: BuildContext) -> None:
        pooling = getattr(ctx.model, "pooling", None)
        self.callback = PoolingEntropyLog(pooling) if hasattr(pooling, "last_entropy") else None

    def callbacks(self) -> list[Callback]:
        return [] if self.callback is None else [self.callback]
