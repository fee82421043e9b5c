"""Target-class selection of the two training schemes of Sec. 3.5 of the SFT paper.

For every feature of a mini-batch a scheme picks the class the feature is transformed
into (its entry of ``Y_gen`` in Eq. 10), or ``-1`` when the feature is not transformed.

* **Balanced train** (:func:`balanced_targets`): "for a feature, we randomly choose a
  different class as target and transform the feature to that class. We do this for every
  feature in the mini-batch. After that, we get a new batch of features with different labels."
* **Unbalanced train** (:func:`unbalanced_targets`): "we set a threshold for the number of
  samples and use it to separate the whole training data into head classes and tail
  classes. For any head features in a mini-batch, we randomly choose a tail class as target
  and transform it into the tail distributions." The split is over the *training set*
  counts: following the implementation details of the paper ("we set the classes that have
  less than 15 samples as tail classes"), a class is **tail** if
  ``0 < count < tail_threshold`` and **head** if ``count >= tail_threshold``; classes with
  no training sample are neither. Head features go to a tail class; tail features are
  **not transformed** (``-1``): the paper generates features only *into* the tail
  distributions, from head features.

**How "randomly choose a different class" is read: the target policy.** The paper does not say
among which classes the target is drawn, nor whether the features of one class are drawn
independently. Its data have about 100 training classes and a batch of 20 classes x 3, and its
batch-size ablation (Sec. 4.2) says that with SFT "the number of positive pairs and negative pairs
are enlarged": the generated batch is a DML batch with positives, which a pair loss
``J(X_gen, Y_gen)`` (Eq. 10) needs. Drawing each target over *every* class makes the generated batch
nearly positive-free once there are many classes (on 1,206 glyph classes: about 1.5 positive pairs
in a generated batch of 60, against 60 in the real one). The candidate classes are those with a
centre (``available_classes``), minus the feature's own class, and the policy says which of them:

* ``"batch"`` (the default): a uniformly drawn other class *present in the mini-batch*, for each
  feature independently. With a P x K batch most generated anchors have a positive (20 x 3: about
  95%), whatever the number of classes in the training set.
* ``"shared"``: one target per *source class*, drawn among the other classes of the mini-batch;
  every feature of that class goes to it, so the P x K structure is kept exactly (each generated
  class has at least K features).
* ``"all"``: a uniformly drawn other class among *all* classes with a centre, for each feature
  independently (the literal, widest reading; with many classes few generated anchors have a positive).

The unbalanced scheme applies the same policy among the *tail* classes: ``"batch"`` and
``"shared"`` draw among the tail classes present in the batch (a head feature gets ``-1`` when the
batch holds none), ``"all"`` among every tail class with a centre. A feature gets ``-1`` whenever
its candidate set is empty (the first batches, before other classes have a centre).

Randomness comes only from the ``torch.Generator`` passed in (a CPU generator); the draws
are vectorised, one ``torch.rand`` per call, so a seed fixes the targets.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

__all__ = ["NO_TARGET", "SCHEMES", "TARGET_POLICIES", "balanced_targets", "split_head_tail", "unbalanced_targets"]

NO_TARGET = -1
SCHEMES = ("balanced", "unbalanced")
TARGET_POLICIES = ("batch", "shared", "all")


def _labels(labels: Tensor) -> Tensor:
    if not isinstance(labels, Tensor) or labels.dim() != 1:
        raise ValueError("labels must be a 1-D tensor of class indices")
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise ValueError(f"labels must be an integer tensor, got {labels.dtype}")
    if labels.numel() and int(labels.min()) < 0:
        raise ValueError("labels must be non-negative class indices 0..C-1")
    return labels.detach().to("cpu", torch.long)


def _classes(available_classes: Tensor | Sequence[int]) -> Tensor:
    """Sorted unique class indices from an index list/tensor or a boolean mask over classes."""
    a = torch.as_tensor(available_classes).detach().to("cpu")
    if a.dim() != 1:
        raise ValueError("available_classes must be a 1-D boolean mask over classes or a 1-D tensor of class indices")
    if a.dtype == torch.bool:
        return torch.nonzero(a).flatten()
    if a.dtype.is_floating_point:
        raise ValueError(f"available_classes must hold integer class indices or booleans, got {a.dtype}")
    return torch.unique(a.long())  # sorted


def _draw_other(labels: Tensor, pool: Tensor, generator: torch.Generator) -> Tensor:
    """For each label, a uniform draw from ``pool`` (sorted, unique) minus that label; -1 if empty."""
    b, k = labels.numel(), pool.numel()
    u = torch.rand(b, generator=generator, dtype=torch.float64)
    if k == 0 or b == 0:
        return torch.full((b,), NO_TARGET, dtype=torch.long)
    pos = torch.searchsorted(pool, labels).clamp(max=k - 1)
    inside = pool[pos] == labels
    n = k - inside.long()  # number of candidates for each feature
    r = torch.minimum((u * n).long(), (n - 1).clamp(min=0))
    r = r + (inside & (r >= pos)).long()  # skip the feature's own class
    out = pool[r.clamp(max=k - 1)]
    return torch.where(n > 0, out, torch.full_like(out, NO_TARGET))


def check_policy(policy: str) -> str:
    if policy not in TARGET_POLICIES:
        raise ValueError(
            f"unknown target policy {policy!r}: choose one of {TARGET_POLICIES} (see dmlkit.augment.schemes)"
        )
    return policy


def draw_targets(labels: Tensor, pool: Tensor, policy: str, generator: torch.Generator) -> Tensor:
    """Targets of ``labels`` (CPU long) among ``pool`` (sorted unique class indices) by ``policy``.

    ``"all"`` draws over ``pool``; ``"batch"`` and ``"shared"`` over ``pool`` restricted to the
    classes of ``labels``; ``"shared"`` draws once per source class. The feature's own class is
    never its target; ``-1`` where no candidate is left.
    """
    check_policy(policy)
    if policy != "all":
        present = torch.unique(labels)
        pool = pool[torch.isin(pool, present)]
    if policy == "shared":
        sources, inverse = torch.unique(labels, return_inverse=True)
        return _draw_other(sources, pool, generator)[inverse]
    return _draw_other(labels, pool, generator)


def balanced_targets(
    labels: Tensor, available_classes: Tensor | Sequence[int], generator: torch.Generator, policy: str = "batch"
) -> Tensor:
    """Balanced train of Sec. 3.5: each feature to a uniformly drawn *other* class with a centre.

    Args:
        labels: ``(B,)`` class of each feature.
        available_classes: the classes that may be targets (those with a centre), as a
            ``(C,)`` boolean mask or a 1-D tensor/sequence of class indices.
        generator: CPU ``torch.Generator``; the only source of randomness.
        policy: ``"batch"`` (among the other classes of the batch, per feature), ``"shared"``
            (one target per source class, among the batch's classes) or ``"all"`` (among all
            available classes, per feature); see the module docstring.

    Returns:
        ``(B,)`` long tensor (on CPU) of target classes, never equal to ``labels``;
        ``-1`` (:data:`NO_TARGET`) where no other class is available.
    """
    return draw_targets(_labels(labels), _classes(available_classes), policy, generator)


def split_head_tail(class_counts: Tensor | Sequence[int], tail_threshold: int) -> tuple[Tensor, Tensor]:
    """Head/tail split of the unbalanced scheme over training-set counts: ``(head_mask, tail_mask)``.

    Tail: ``0 < count < tail_threshold`` (the paper: "classes that have less than 15
    samples"); head: ``count >= tail_threshold``. Raises ``ValueError`` when the threshold
    leaves no head or no tail class (the unbalanced scheme would generate nothing).
    """
    counts = torch.as_tensor(class_counts).detach().to("cpu")
    if counts.dim() != 1 or counts.numel() == 0:
        raise ValueError("class_counts must be a non-empty 1-D sequence: the number of training samples of each class")
    if counts.dtype.is_floating_point or counts.dtype == torch.bool or (counts < 0).any():
        raise ValueError("class_counts must hold non-negative integer sample counts per class")
    if isinstance(tail_threshold, bool) or int(tail_threshold) != tail_threshold or tail_threshold < 1:
        raise ValueError(f"tail_threshold must be a positive integer number of samples, got {tail_threshold!r}")
    counts = counts.long()
    head = counts >= tail_threshold
    tail = (counts > 0) & (counts < tail_threshold)
    lo, hi = int(counts[counts > 0].min()) if (counts > 0).any() else 0, int(counts.max())
    if not tail.any():
        raise ValueError(
            f"tail_threshold={tail_threshold} leaves no tail class (classes with fewer than {tail_threshold} "
            f"training samples; the counts range over [{lo}, {hi}]): raise the threshold above {lo}, "
            "or use the balanced scheme for a balanced training set"
        )
    if not head.any():
        raise ValueError(
            f"tail_threshold={tail_threshold} leaves no head class (classes with at least {tail_threshold} "
            f"training samples; the counts range over [{lo}, {hi}]): lower the threshold to at most {hi}, "
            "or use the balanced scheme"
        )
    return head, tail


def unbalanced_targets(
    labels: Tensor,
    class_counts: Tensor | Sequence[int],
    tail_threshold: int,
    generator: torch.Generator,
    available_classes: Tensor | Sequence[int] | None = None,
    policy: str = "batch",
) -> Tensor:
    """Unbalanced train of Sec. 3.5: head features to a uniformly drawn tail class; tail features untouched.

    Args:
        labels: ``(B,)`` class of each feature.
        class_counts: ``(C,)`` number of *training-set* samples of each class.
        tail_threshold: classes with ``0 < count < tail_threshold`` are tail, ``count >=
            tail_threshold`` head (see :func:`split_head_tail`).
        generator: CPU ``torch.Generator``; the only source of randomness.
        available_classes: optional restriction of the targets (classes with a centre), a
            ``(C,)`` boolean mask or class indices; ``None`` means every tail class.
        policy: which tail classes are candidates: those of the batch (``"batch"``, ``"shared"``:
            one per source class) or every one (``"all"``); see the module docstring.

    Returns:
        ``(B,)`` long tensor (on CPU): a tail class for each head feature, ``-1``
        (:data:`NO_TARGET`) for tail features and for head features without a candidate tail class.
    """
    labels = _labels(labels)
    head, tail = split_head_tail(class_counts, tail_threshold)
    c = head.numel()
    if labels.numel() and int(labels.max()) >= c:
        raise ValueError(f"labels must lie in [0, {c}) (class_counts has {c} entries), got max {int(labels.max())}")
    if available_classes is not None:
        avail = torch.zeros(c, dtype=torch.bool)
        idx = _classes(available_classes)
        avail[idx[idx < c]] = True
        tail = tail & avail
    pool = torch.nonzero(tail).flatten()
    return mask_head(draw_targets(labels, pool, policy, generator), head[labels])


def mask_head(targets: Tensor, from_head: Tensor) -> Tensor:
    """Unbalanced train: only head features are transformed (``-1`` for the others)."""
    return torch.where(from_head, targets, torch.full_like(targets, NO_TARGET))
