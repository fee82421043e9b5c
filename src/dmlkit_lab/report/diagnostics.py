"""The ``geometry`` diagnostic of ``dmlkit evaluate RUN --diagnostics``, registered by the lab's plug-in.

``geometry_diagnostic`` returns ``geometry``: :func:`dmlkit_lab.evaluation.geometry.geometry_report` of the split's
embeddings (r_w of Eq. 8, divergences of Eq. 11, ``||A sigma - sigma||``, spectra), and ``figures``: the plots of
``dmlkit_lab.viz.geometry_plots`` under ``plots/geometry_<split>/`` when plots are asked for
(``dmlkit.report.diagnostics.run_diagnostics``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor

from dmlkit.report.diagnostics import register_run_diagnostic
from dmlkit_lab.evaluation.geometry import geometry_report

__all__ = ["geometry_diagnostic", "register_diagnostics"]


def geometry_diagnostic(embeddings: Tensor, labels: Tensor, plots_dir: Path | None, seed: int) -> dict[str, Any]:
    """The SFT paper's geometry of ``embeddings`` and, with ``plots_dir``, its figures there."""
    found: dict[str, Any] = {"geometry": geometry_report(embeddings, labels, seed=seed)}
    if plots_dir is not None:
        from dmlkit_lab.viz.geometry_plots import geometry_figures

        found["figures"] = geometry_figures(embeddings, labels, plots_dir, seed=seed)
    return found


def register_diagnostics() -> None:
    register_run_diagnostic("geometry", geometry_diagnostic)
