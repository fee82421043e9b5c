"""Zero-shot prediction with GSP's pseudo-attributes: the evaluation of the thesis' Sec. 5.3.3 (Fig. 5.6).

A GSP model gives each image a pseudo-attribute vector ``z = rowsum(pi) / mu`` (Eq. 5.2.3, the
share of the transported mass each prototype receives) and an embedding. The thesis asks whether
the attributes transfer across classes:

1. per class ``c``, the attribute histogram ``a_c`` (the mean of ``z`` over the class's images)
   and the mean embedding ``e_c``;
2. the classes are split at random into two halves; the ridge predictor of (P3),
   ``A = argmin sum_{c in fit} ||A a_c - e_c||^2 + eps ||A||^2`` (closed form), is fitted on one
   half and maps the attribute histograms of the other half to predicted means ``A a_c``;
3. each predicted mean is classified by its nearest true mean among the held-out classes, by
   l2 distance and by cosine distance; the accuracy over the held-out classes is one repeat;
4. repeated with new splits (1,000 times in the thesis), mean and standard deviation reported.

The thesis uses CIFAR-10 (10 classes: fit on 5, predict 5, chance 20%) and compares a model
trained with and without the zero-shot loss. ``classes_per_repeat`` draws that many classes
per repeat from a test set with more classes (10 by default, as the thesis; ``None`` uses all),
so the chance level stays ``1 / (held-out classes)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from dmlkit.validation import is_int

__all__ = ["per_class_means", "zero_shot_attribute_eval"]


def per_class_means(values: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(classes (C,), means (C, d))``: the mean row of ``values (N, d)`` for each label, in sorted label order."""
    if values.ndim != 2 or labels.shape != (values.shape[0],):
        raise ValueError(f"values must be (N, d) and labels (N,), got {tuple(values.shape)} and {tuple(labels.shape)}")
    classes, inverse = torch.unique(labels, return_inverse=True)
    sums = torch.zeros(classes.numel(), values.shape[1], dtype=values.dtype).index_add_(0, inverse, values)
    counts = torch.bincount(inverse, minlength=classes.numel()).to(values.dtype)
    return classes, sums / counts[:, None]


def _ridge(a: torch.Tensor, e: torch.Tensor, ridge: float) -> torch.Tensor:
    """``A^T`` of (P3) for inputs ``a (k, m)`` and targets ``e (k, d)``: ``(a^T a + eps I)^-1 a^T e``, shape ``(m, d)``."""
    k, m = a.shape
    if m <= k:
        return torch.linalg.solve(a.T @ a + ridge * torch.eye(m, dtype=a.dtype), a.T @ e)
    return a.T @ torch.linalg.solve(a @ a.T + ridge * torch.eye(k, dtype=a.dtype), e)


def _nearest_accuracy(predicted: torch.Tensor, true: torch.Tensor, metric: str) -> float:
    if metric == "cosine":
        dist = 1.0 - F.normalize(predicted, dim=1) @ F.normalize(true, dim=1).T
    else:
        dist = torch.cdist(predicted, true)
    return float((dist.argmin(dim=1) == torch.arange(true.shape[0])).to(torch.float64).mean())


def zero_shot_attribute_eval(
    attributes: torch.Tensor,
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    repeats: int = 1000,
    classes_per_repeat: int | None = 10,
    ridge: float = 0.05,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """The protocol of Sec. 5.3.3 (module docstring) on per-image ``attributes (N, m)`` and ``embeddings (N, d)``.

    Returns the mean and standard deviation over ``repeats`` of the nearest-mean accuracy on the
    held-out half by l2 (``l2``, ``l2_std``) and cosine distance (``cosine``, ``cosine_std``), the
    chance level ``chance = 1 / held-out classes``, and the counts. Float64 throughout.
    """
    if (
        attributes.ndim != 2
        or embeddings.ndim != 2
        or not attributes.shape[0] == embeddings.shape[0] == labels.shape[0]
    ):
        raise ValueError(
            f"attributes (N, m), embeddings (N, d) and labels (N,) must share N, got {tuple(attributes.shape)}, "
            f"{tuple(embeddings.shape)} and {tuple(labels.shape)}"
        )
    if not is_int(repeats) or repeats < 1:
        raise ValueError(f"repeats must be a positive integer (1000 in the thesis), got {repeats!r}")
    if not (isinstance(ridge, (int, float)) and math.isfinite(ridge) and ridge > 0):
        raise ValueError(f"ridge (eps of P3) must be a positive number, got {ridge!r}")
    _, a = per_class_means(attributes.detach().cpu().double(), labels.cpu())
    _, e = per_class_means(embeddings.detach().cpu().double(), labels.cpu())
    total = a.shape[0]
    per = total if classes_per_repeat is None else int(classes_per_repeat)
    if per < 4 or per > total:
        raise ValueError(
            f"classes_per_repeat must lie in [4, {total}] (the classes of the set; 2 to fit and 2 to predict at least), "
            f"got {classes_per_repeat!r}; use None for all classes"
        )
    acc = {"l2": [], "cosine": []}
    for _ in range(repeats):
        chosen = torch.randperm(total, generator=generator)[:per]
        fit, held = chosen[: per // 2], chosen[per // 2 :]
        predicted = a[held] @ _ridge(a[fit], e[fit], float(ridge))
        for metric in acc:
            acc[metric].append(_nearest_accuracy(predicted, e[held], metric))
    out: dict[str, float] = {}
    for metric, values in acc.items():
        t = torch.tensor(values, dtype=torch.float64)
        out[metric] = float(t.mean())
        out[f"{metric}_std"] = float(t.std()) if len(values) > 1 else 0.0
    held_out = per - per // 2
    out.update(chance=1.0 / held_out, classes=float(total), classes_per_repeat=float(per), repeats=float(repeats))
    return out
