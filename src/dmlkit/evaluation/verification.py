"""Face verification metrics as the SFT paper reports them (Sec. 4.1, Tables 2 and 4).

Inputs are *similarity scores* of image pairs (higher = more likely the same
identity; pass ``-distance`` for distances) with a boolean ``same`` per pair;
:func:`pair_scores` computes them from two embedding matrices.

**LFW / YTF accuracy** (:func:`kfold_accuracy`), the "unrestricted with labeled
outside data" protocol: the pairs are cut into 10 folds (LFW's ``pairs.txt``
lists 10 consecutive sets of 600 pairs); for each fold, a threshold is chosen
on the other 9 folds and the fold's accuracy is measured with it; the result
is the mean (and standard deviation) of the 10 accuracies. A pair is
predicted "same" when ``score >= threshold``. The threshold chosen on the
training folds is the one of highest training accuracy among the candidates
``{midpoints between consecutive distinct training scores} U {min - 1, max + 1}``
(every distinct decision on the training pairs, placed halfway between
scores); ties go to the smallest threshold.

**TAR at FAR** (:func:`tar_at_far`), the IJB-C 1:1 protocol: for a target false
accept rate ``f`` over ``N`` impostor scores, the threshold is the smallest
``t`` with ``#{impostor > t} <= floor(f * N)``, i.e. the
``(floor(f * N) + 1)``-th largest impostor score; a pair is accepted when its
score is *strictly* above ``t``, so the achieved FAR never exceeds ``f``.
TAR is the fraction of genuine scores above ``t``. When ``f * N < 1`` no
impostor may be accepted (``t`` is the largest impostor score): the FAR is
then not resolved by the data, which the result flags (``resolved``).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

__all__ = ["kfold_accuracy", "pair_scores", "tar_at_far", "best_threshold", "verification_metrics"]

DEFAULT_FARS = (1e-5, 1e-4, 1e-3)


def _scores_and_labels(scores: object, same: object) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores.detach().cpu() if isinstance(scores, torch.Tensor) else scores, dtype=np.float64).reshape(-1)
    y = np.asarray(same.detach().cpu() if isinstance(same, torch.Tensor) else same).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"scores ({s.size}) and same ({y.size}) must have one entry per pair")
    if not np.isfinite(s).all():
        raise ValueError("scores must be finite (no nan / inf)")
    if y.dtype != bool:
        if not np.isin(y, (0, 1)).all():
            raise ValueError("same must be booleans or 0/1 (1 = the pair shows one identity)")
        y = y.astype(bool)
    return s, y


def pair_scores(first: object, second: object, metric: str = "cosine") -> np.ndarray:
    """Similarity of pairs ``(first[i], second[i])``: ``cosine`` or ``neg_euclidean`` (= -||a - b||)."""
    a = torch.as_tensor(first).double()
    b = torch.as_tensor(second).double()
    if a.shape != b.shape or a.dim() != 2:
        raise ValueError(f"pair embeddings must both be (n_pairs, d), got {tuple(a.shape)} and {tuple(b.shape)}")
    if metric == "cosine":
        return torch.nn.functional.cosine_similarity(a, b, dim=1).numpy()
    if metric == "neg_euclidean":
        return (-(a - b).norm(dim=1)).numpy()
    raise ValueError(f"unknown metric '{metric}'; valid metrics are: cosine, neg_euclidean")


def best_threshold(scores: object, same: object) -> tuple[float, float]:
    """``(threshold, accuracy)`` of the candidate threshold with the highest accuracy on these pairs.

    Candidates and ties as in the module docstring; O(n log n) by sorting.
    """
    s, y = _scores_and_labels(scores, same)
    if s.size == 0:
        raise ValueError("best_threshold needs at least one pair")
    order = np.argsort(s, kind="stable")
    s, y = s[order], y[order]
    distinct, first = np.unique(s, return_index=True)
    # threshold below index first[j]: pairs [first[j]:] predicted same
    neg_below = np.concatenate([[0], np.cumsum(~y)])  # negatives among the lowest i pairs
    pos_total = int(y.sum())
    pos_below = np.concatenate([[0], np.cumsum(y)])
    starts = np.concatenate([first, [s.size]])  # also "nothing predicted same"
    correct = neg_below[starts] + (pos_total - pos_below[starts])
    best = int(np.argmax(correct))  # first = smallest threshold among ties
    if best == 0:
        threshold = float(distinct[0]) - 1.0
    elif best == distinct.size:
        threshold = float(distinct[-1]) + 1.0
    else:
        threshold = 0.5 * (float(distinct[best - 1]) + float(distinct[best]))
    return threshold, float(correct[best]) / s.size


def kfold_accuracy(scores: object, same: object, folds: int | Sequence[int] = 10) -> dict[str, object]:
    """LFW-style accuracy: threshold chosen on the other folds, accuracy on each fold (module docstring).

    ``folds`` is a number of consecutive equal folds (LFW's ``pairs.txt`` order)
    or a fold id per pair. Returns ``accuracy`` (mean over folds), ``accuracy_std``
    (population std, as LFW results are reported), and per-fold ``fold_accuracies``
    and ``thresholds``.
    """
    s, y = _scores_and_labels(scores, same)
    if isinstance(folds, int) and not isinstance(folds, bool):
        if folds < 2 or folds > s.size:
            raise ValueError(f"folds must be between 2 and the number of pairs ({s.size}), got {folds}")
        fold_of = np.arange(s.size) * folds // s.size
    else:
        fold_of = np.asarray(folds).reshape(-1)
        if fold_of.shape != s.shape:
            raise ValueError("folds must be an int or one fold id per pair")
    ids = np.unique(fold_of)
    if ids.size < 2:
        raise ValueError("kfold_accuracy needs at least two folds")
    accuracies, thresholds = [], []
    for k in ids:
        test = fold_of == k
        t, _ = best_threshold(s[~test], y[~test])
        accuracies.append(float(((s[test] >= t) == y[test]).mean()))
        thresholds.append(t)
    return {
        "accuracy": float(np.mean(accuracies)),
        "accuracy_std": float(np.std(accuracies)),
        "fold_accuracies": accuracies,
        "thresholds": thresholds,
    }


def tar_at_far(
    genuine: object, impostor: object, fars: Sequence[float] = DEFAULT_FARS
) -> dict[float, dict[str, float]]:
    """TAR at each target FAR from genuine and impostor similarity scores (module docstring).

    Returns ``{far: {"tar", "threshold", "far" (achieved), "resolved"}}``;
    ``resolved`` is 1.0 when ``far * len(impostor) >= 1``, else 0.0.
    Uses a partial sort, so tens of millions of impostor scores are fine.
    """
    g = np.asarray(genuine, dtype=np.float64).reshape(-1)
    imp = np.asarray(impostor, dtype=np.float64).reshape(-1)
    if g.size == 0 or imp.size == 0:
        raise ValueError("tar_at_far needs at least one genuine and one impostor score")
    if not (np.isfinite(g).all() and np.isfinite(imp).all()):
        raise ValueError("scores must be finite (no nan / inf)")
    out: dict[float, dict[str, float]] = {}
    n = imp.size
    for far in fars:
        if not 0 < far < 1:
            raise ValueError(f"FAR targets must lie in (0, 1), got {far}")
        allowed = min(int(math.floor(far * n + 1e-9)), n - 1)  # impostors that may be accepted
        position = n - 1 - allowed  # the (allowed + 1)-th largest impostor score
        t = float(np.partition(imp, position)[position])
        out[far] = {
            "tar": float((g > t).mean()),
            "threshold": t,
            "far": float((imp > t).mean()),
            "resolved": 1.0 if far * n >= 1 else 0.0,
        }
    return out


def verification_metrics(
    scores: object, same: object, folds: int | Sequence[int] = 10, fars: Sequence[float] = DEFAULT_FARS
) -> dict[str, float]:
    """A flat summary: ``accuracy``, ``accuracy_std`` (k-fold) and ``tar@far=<f>`` for each ``f``."""
    s, y = _scores_and_labels(scores, same)
    acc = kfold_accuracy(s, y, folds)
    result = {"accuracy": float(acc["accuracy"]), "accuracy_std": float(acc["accuracy_std"])}  # type: ignore[arg-type]
    for far, row in tar_at_far(s[y], s[~y], fars).items():
        result[f"tar@far={far:g}"] = row["tar"]
    return result
