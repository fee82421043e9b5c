"""The cross-batch zero-shot prediction loss of GSP (thesis Sec. 5.2.3, problem P3, Eq. 5.2.3-5.2.4).

A GSP layer transports mass ``mu`` from the ``n`` local features of an image to
``m`` prototypes; its plan ``pi`` is ``(B, m, n)``. The loss asks the mass each
prototype receives to predict the class, in a zero-shot way:

1. pseudo-attributes (Eq. 5.2.3): ``z = (1/mu) sum_j pi[:, :, j]`` -> ``(B, m)``,
   a distribution over the prototypes (``sum_i z_i = 1`` when the plan carries mass ``mu``);
2. the batch is split into two halves ``b1``, ``b2`` with disjoint classes
   (``class_disjoint_halves``);
3. on each half, the ridge predictor of problem P3 maps pseudo-attributes to
   learnable class embeddings ``v_y`` (``Upsilon``, one row per training class):
   ``A_b = argmin_A sum_{i in b} ||A z_i - v_{y_i}||^2 + eps ||A||_F^2``, in closed form
   ``A_b = Upsilon_b (Z_b^T Z_b + eps I)^{-1} Z_b^T = Upsilon_b Z_b^T (Z_b Z_b^T + eps I)^{-1}``
   (``ridge_predictor``; the two forms are equal, the smaller system is solved);
4. the predictor of one half scores the samples of the other half (Eq. 5.2.4, both directions).

Reading of the garbled sum of Eq. 5.2.4. The extracted text reads
``log(1 + sum_{j in [c]} exp((v_j - v_{y_i})^T A_1 z_i))`` and calls it a
"rearranged soft-max cross-entropy". Taken literally, ``j = y_i`` contributes
``exp(0) = 1`` and the loss could never go below ``log 2``; the rearranged
cross-entropy is ``-log softmax_j(s)_{y_i} = log(1 + sum_{j != y_i} exp(s_j - s_{y_i}))``
with scores ``s_j = v_j^T A z_i``. We implement that reading: the sum runs over
all ``c`` class embeddings except the true class, i.e. the loss of a sample is
the cross-entropy of the logits ``Upsilon A z_i`` with target ``y_i``. Each
direction is averaged over its half (the ``1/|b_2|`` and ``1/|b_1|`` factors)
and the two directions are added, as written.

Scale. Eq. 5.2.4 has none: the logits are ``s_j = v_j^T A z_i``. The author's code
(``tensorflow/framework/losses/zsr_loss.py``, ``softmax_scale = 9.5``, margin 0) multiplies
them by 9.5 before the softmax over the class embeddings. Without a scale, class
embeddings of about unit norm give logits of order 1 over hundreds of classes, a
near-uniform softmax (the loss sits at about ``2 log c``) until ``Upsilon`` grows. The
loss takes ``scale`` (default 9.5, the code's; ``scale=1`` is the text as written):
``s_j = scale * v_j^T A z_i``.

Class embeddings. Their dimension is not given in the thesis; the author's code gives
them the embedding's size (``cfg.model.embedding_head.embedding_size``, 128) and a
He-normal start. ``ZeroShotPredictionLoss`` takes ``embedding_dim`` (the training method
passes the model's embedding size unless ``methods.zero_shot.params.embedding_dim`` says
otherwise; the class alone defaults to ``m``) and starts them at ``N(0, 1/k)`` entries,
about unit norm. The ridge weight defaults to ``eps = 0.05`` (Sec. 5.2.4; the code's
``regression_regularizer_weight``). ``(1 - lam) L_DML + lam L_ZS`` (Eq. 5.2.5) is
assembled by the objective, not here.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from dmlkit.validation import check_int, check_real, is_int

__all__ = [
    "ZeroShotPredictionLoss",
    "class_disjoint_halves",
    "pseudo_attributes",
    "ridge_predictor",
    "zero_shot_prediction_loss",
]


def pseudo_attributes(plan: torch.Tensor, mu: float) -> torch.Tensor:
    """``z = (1/mu) * (row sums of the plan)`` (Eq. 5.2.3): ``(B, m, n) -> (B, m)``."""
    if plan.ndim != 3:
        raise ValueError(f"the transport plan must be (B, m, n), got shape {tuple(plan.shape)}")
    if not 0.0 < float(mu) <= 1.0:
        raise ValueError(f"mu must lie in (0, 1] (the transported mass of GSP), got {mu}")
    return plan.sum(dim=-1) / float(mu)


def ridge_predictor(z: torch.Tensor, targets: torch.Tensor, ridge: float) -> torch.Tensor:
    """Closed-form solution of problem P3, returned as ``A^T`` of shape ``(m, k)``.

    ``z`` is ``(b, m)`` (rows ``z_i``), ``targets`` is ``(b, k)`` (rows ``v_{y_i}``);
    ``A^T = (Z^T Z + eps I_m)^{-1} Z^T V = Z^T (Z Z^T + eps I_b)^{-1} V`` (push-through
    identity), so predictions are ``z @ A^T``. The smaller of the two systems is solved.
    """
    if z.ndim != 2 or targets.ndim != 2 or z.shape[0] != targets.shape[0]:
        raise ValueError(f"z (b, m) and targets (b, k) must share b, got {tuple(z.shape)} and {tuple(targets.shape)}")
    if not ridge > 0:
        raise ValueError(f"the ridge weight eps of P3 must be positive, got {ridge}")
    b, m = z.shape
    if m <= b:
        gram = z.T @ z + ridge * torch.eye(m, dtype=z.dtype, device=z.device)
        return torch.linalg.solve(gram, z.T @ targets)
    kernel = z @ z.T + ridge * torch.eye(b, dtype=z.dtype, device=z.device)
    return z.T @ torch.linalg.solve(kernel, targets)


def class_disjoint_halves(
    labels: torch.Tensor, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices ``(b1, b2)`` of two halves of the batch whose classes are disjoint.

    The distinct classes of the batch are split into ``ceil(k/2)`` and
    ``floor(k/2)`` classes: in sorted order without a ``generator`` (deterministic
    given the labels), in a random order drawn from ``generator`` otherwise.
    Every sample lies in exactly one half.
    """
    if labels.ndim != 1:
        raise ValueError(f"labels must be 1-d, got shape {tuple(labels.shape)}")
    classes = torch.unique(labels)
    k = classes.numel()
    if k < 2:
        raise ValueError(
            f"the zero-shot prediction loss splits the batch by class and needs >= 2 classes, got {k}; "
            "sample several classes per batch"
        )
    if generator is not None:
        classes = classes[torch.randperm(k, generator=generator).to(classes.device)]
    first = classes[: (k + 1) // 2]
    in_first = torch.isin(labels, first)
    return torch.nonzero(in_first).squeeze(1), torch.nonzero(~in_first).squeeze(1)


def _direction(
    z_fit: torch.Tensor,
    y_fit: torch.Tensor,
    z_eval: torch.Tensor,
    y_eval: torch.Tensor,
    class_embeddings: torch.Tensor,
    ridge: float,
    scale: float,
) -> torch.Tensor:
    a_t = ridge_predictor(z_fit, class_embeddings[y_fit], ridge)  # (m, k) = A^T
    logits = scale * ((z_eval @ a_t) @ class_embeddings.T)  # s_ij = scale * v_j^T A z_i
    return F.cross_entropy(logits, y_eval)  # log(1 + sum_{j != y} exp(s_j - s_y)), mean over the half


def zero_shot_prediction_loss(
    z: torch.Tensor,
    labels: torch.Tensor,
    class_embeddings: torch.Tensor,
    ridge: float = 0.05,
    halves: tuple[torch.Tensor, torch.Tensor] | None = None,
    scale: float = 9.5,
) -> torch.Tensor:
    """``L_ZS`` of Eq. 5.2.4 from pseudo-attributes ``z (B, m)``, labels ``(B,)`` and ``Upsilon (c, k)``.

    ``halves`` are the class-disjoint index sets ``(b1, b2)`` (default:
    ``class_disjoint_halves(labels)``); ``scale`` multiplies the logits (9.5: the author's
    code; 1: Eq. 5.2.4 as written). Returns
    ``mean_{i in b2} CE(scale Upsilon A_1 z_i, y_i) + mean_{i in b1} CE(scale Upsilon A_2 z_i, y_i)``.
    """
    if z.ndim != 2 or labels.shape != (z.shape[0],):
        raise ValueError(f"z must be (B, m) and labels (B,), got {tuple(z.shape)} and {tuple(labels.shape)}")
    if not (isinstance(scale, (int, float)) and not isinstance(scale, bool) and math.isfinite(scale) and scale > 0):
        raise ValueError(
            f"the zero-shot softmax scale must be a positive number (9.5 in the author's code), got {scale!r}"
        )
    if class_embeddings.ndim != 2:
        raise ValueError(f"class_embeddings must be (num_classes, k), got shape {tuple(class_embeddings.shape)}")
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= class_embeddings.shape[0]):
        raise ValueError(f"labels must lie in [0, {class_embeddings.shape[0]}) (the number of class embeddings)")
    b1, b2 = halves if halves is not None else class_disjoint_halves(labels)
    if b1.numel() == 0 or b2.numel() == 0:
        raise ValueError("both halves of the batch must be non-empty")
    if bool(torch.isin(labels[b1], labels[b2]).any()):
        raise ValueError("the two halves must have disjoint classes")
    z1, y1, z2, y2 = z[b1], labels[b1], z[b2], labels[b2]
    scale = float(scale)
    return _direction(z1, y1, z2, y2, class_embeddings, ridge, scale) + _direction(
        z2, y2, z1, y1, class_embeddings, ridge, scale
    )


class ZeroShotPredictionLoss(nn.Module):
    """``L_ZS`` (Eq. 5.2.4) with its learnable class embeddings ``Upsilon`` (thesis Sec. 5.2.3).

    Args:
        num_classes: ``c``, the number of training classes (one embedding each).
        num_prototypes: ``m``, the number of GSP prototypes (length of ``z``).
        mu: transported mass of the GSP layer (``z = rowsum(plan) / mu``, Eq. 5.2.3).
        embedding_dim: length ``k`` of a class embedding (default ``m``; not given in the thesis; the
            author's code uses the embedding's size, which the training method passes).
        ridge: ``eps`` of problem P3 (0.05 in Sec. 5.2.4).
        scale: multiplies the logits (9.5 in the author's code; 1 is Eq. 5.2.4 as written).
        generator: draws the initial class embeddings (N(0, 1/k) entries).

    The class embeddings are exempt from weight decay (``no_weight_decay``).

    ``forward(plan (B, m, n), labels (B,), generator=None)``: the halves are
    drawn from ``generator`` (sorted class order without one).
    """

    def __init__(
        self,
        num_classes: int,
        num_prototypes: int,
        mu: float = 0.3,
        embedding_dim: int | None = None,
        ridge: float = 0.05,
        scale: float = 9.5,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("num_classes", num_classes), ("num_prototypes", num_prototypes)):
            check_int(name, value, 1)
        dim = num_prototypes if embedding_dim is None else embedding_dim
        if not is_int(dim) or dim < 1:
            raise ValueError(f"embedding_dim must be a positive int or None (= num_prototypes), got {embedding_dim!r}")
        if not 0.0 < float(mu) <= 1.0:
            raise ValueError(f"mu must lie in (0, 1], got {mu}")
        if not ridge > 0:
            raise ValueError(f"ridge must be positive, got {ridge}")
        check_real("scale", scale, 0, low_open=True, hint="9.5 in the author's code, 1 for Eq. 5.2.4 as written")
        self.scale = float(scale)
        self.num_prototypes = num_prototypes
        self.mu = float(mu)
        self.ridge = float(ridge)
        # unit-scale class embeddings: ||v|| ~ 1, so the initial logits are O(1)
        self.class_embeddings = nn.Parameter(torch.randn(num_classes, dim, generator=generator) / math.sqrt(dim))

    def forward(
        self, plan: torch.Tensor, labels: torch.Tensor, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        z = pseudo_attributes(plan, self.mu)
        if z.shape[1] != self.num_prototypes:
            raise ValueError(f"the plan has {z.shape[1]} prototypes but the loss was built for {self.num_prototypes}")
        halves = class_disjoint_halves(labels, generator)
        return zero_shot_prediction_loss(z, labels, self.class_embeddings, self.ridge, halves, self.scale)

    def no_weight_decay(self) -> list[str]:
        return ["class_embeddings"]

    def extra_repr(self) -> str:
        c, k = self.class_embeddings.shape
        return f"num_classes={c}, num_prototypes={self.num_prototypes}, embedding_dim={k}, mu={self.mu}, ridge={self.ridge}, scale={self.scale}"
