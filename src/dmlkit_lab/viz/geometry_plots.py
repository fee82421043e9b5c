"""Figures of the SFT paper's diagnostics (``dmlkit_lab.evaluation.geometry``) for one embedding set.

- ``divergences.png``: per-class divergence (Eq. 11) sorted, with its mean and std (Fig. 4a);
- ``rotation_residuals.png``: histogram of ``||A sigma - sigma||`` (Fig. 6a);
- ``covariance_spectra.png``: eigenvalues vs diagonal variances of the largest classes (Fig. 2b-c);
- ``r_w_curve.png``: ``r_w`` (Eq. 8) against the energy kept of the class means (Fig. 6c).
"""

from __future__ import annotations

from pathlib import Path

import torch

from dmlkit_lab.evaluation.geometry import class_divergences, covariance_spectra, r_w_curve, rotation_residuals
from dmlkit.viz.plots import _save, plt

ENERGIES = (0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999)


def geometry_figures(embeddings: torch.Tensor, labels: torch.Tensor, out_dir: str | Path, seed: int = 0) -> list[Path]:
    """Write the four figures into ``out_dir``; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [
        out / name for name in ("divergences.png", "rotation_residuals.png", "covariance_spectra.png", "r_w_curve.png")
    ]

    div = class_divergences(embeddings, labels).sort().values
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.bar(range(len(div)), div.numpy(), width=1.0, color="tab:blue")
    ax.axhline(
        float(div.mean()),
        color="k",
        ls="--",
        lw=1,
        label=f"mean {float(div.mean()):.3f}, std {float(div.std(correction=0)):.3f}",
    )
    ax.set(xlabel="class (sorted)", ylabel="divergence trace(S_w,k)", title="Class divergences (Eq. 11)")
    ax.legend(fontsize=8)
    _save(fig, paths[0])

    res = rotation_residuals(embeddings, labels, generator=torch.Generator().manual_seed(seed))
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.hist(res.numpy(), bins=40, color="tab:orange")
    ax.set(
        xlabel="||A sigma - sigma||",
        ylabel="count",
        title=f"SFT vs translation residual (mean {float(res.mean()):.3f})",
    )
    _save(fig, paths[1])

    spectra = covariance_spectra(embeddings, labels, num_classes=4, top=16)
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2), sharey=True)
    for k, (ev, var) in enumerate(zip(spectra["eigenvalues"], spectra["variances"])):
        axes[0].plot(var.numpy(), marker=".", label=f"class {k + 1}")
        axes[1].plot(ev.numpy(), marker=".", label=f"class {k + 1}")
    axes[0].set(title=f"diagonal variances (spread {spectra['variance_spread']:.0%})", xlabel="dimension")
    axes[1].set(title=f"eigenvalues (spread {spectra['relative_spread']:.0%})", xlabel="rank")
    axes[0].legend(fontsize=7)
    _save(fig, paths[2])

    curve = r_w_curve(embeddings, labels, ENERGIES)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(list(curve), list(curve.values()), marker="o")
    ax.set(
        xlabel="energy of the class means kept",
        ylabel="r_w (Eq. 8)",
        ylim=(0, 1),
        title="Within-class energy in the mean subspace",
    )
    _save(fig, paths[3])
    return paths
