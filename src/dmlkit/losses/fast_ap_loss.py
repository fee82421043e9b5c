"""FastAP (Cakir et al., "Deep Metric Learning to Rank", CVPR 2019) with a closed-form gradient.

The value is exactly PML's ``FastAPLoss(num_bins)``; the gradient is the
closed form of Sec. C.2-C.3 of the FastAP supplement in a custom
``torch.autograd.Function`` instead of autograd through an ``(L, M, M)`` pulse
tensor.

Definition (as PML defines it)
------------------------------
Embeddings are L2-normalised, ``D_ij = ||x_i - x_j||^2`` lies in ``[0, 4]``.
With ``L = num_bins + 1`` bin centres ``c_l = l * Delta``, ``Delta = 4 / num_bins``,
the soft (triangular) bin membership is (Eq. 6-7)::

    delta(D, l) = max(0, 1 - |D - c_l| / Delta)

and for query ``i`` the positive / negative histograms over the other items are
``h+_il = sum_{j in P_i} delta(D_ij, l)``, ``h-_il = sum_{j in N_i} delta(D_ij, l)``,
with cumulative sums ``H+_il = sum_{k<=l} h+_ik`` and ``H_il = sum_{k<=l} (h+_ik + h-_ik)``.
Eq. 21::

    FastAP_i = (1 / |P_i|) * sum_l  h+_il * H+_il / H_il        (terms with H_il = 0 are 0)

and the loss is ``1 - FastAP_i`` per query, multiplied by the miner's per-anchor
weight (PML's ``convert_to_weights``), reduced by the reducer (default: the
mean).  **Which queries count** (PML's rule, kept so the values agree):

* a query without positives is skipped (it is not in the mean);
* a query with positives but *no negatives* is kept: its FastAP is 1 (the soft
  bins sum to one on ``[0, 4]``), so it adds a loss of 0 and counts in the
  denominator of the mean.

Gradient (Sec. C.2-C.3)
-----------------------
Derivative of ``F_i = sum_l h+_l H+_l / H_l`` wrt the histogram entries
(Eq. 26-30, written with reverse cumulative sums)::

    dF/dh+_k = H+_k / H_k + sum_{l>=k} (h+_l / H_l - h+_l H+_l / H_l^2)
    dF/dh-_k = - sum_{l>=k} h+_l H+_l / H_l^2

chained with the soft-binning derivative ``d delta(D, l)/dD = -sign(D - c_l) / Delta``
on ``|D - c_l| < Delta`` and with Eq. 17, ``dD_ij/dx_i = 2 (x_i - x_j)``.

Cost: a distance ``D_ij`` has non-zero membership in at most two adjacent bins,
``b = floor(D_ij / Delta)`` and ``b + 1``, with weights ``1 - t`` and ``t``
(``t = D_ij / Delta - b``).  So the forward scatter-adds, per query, a count and
the ``t`` of each pair into its lower bin (``h_l = count_l - tsum_l + tsum_{l-1}``),
and the backward gathers ``dF_i/dD_ij = (g_{i,b+1} - g_{i,b}) / Delta`` from a
per-query table of histogram-derivative differences.  Nothing of shape
``(M, M, L)`` is ever formed: time is ``O(M^2 d + M^2 + M L)`` (the two
``M x M x d`` matrix products dominate; the paper's dense ``O(L M^2)`` is not
needed), memory ``O(M^2 + M L)`` (a few ``M x M`` matrices: distances turned
into fractions, bin indices, the gradient wrt distances).

At the measure-zero set where a distance equals a bin centre exactly, autograd
through ``relu(1 - |D - c|/Delta)`` takes the sub-gradient 0 at the kinks while
this backward takes the one-sided derivative of the lower bin; both are valid.
"""

from __future__ import annotations

from typing import Any

import torch

from dmlkit.half_precision import in_float32
from pytorch_metric_learning.distances import LpDistance
from pytorch_metric_learning.losses import BaseMetricLossFunction
from pytorch_metric_learning.utils import common_functions as c_f
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

__all__ = ["FastAPLoss", "fast_ap_per_query", "fast_ap_masks"]

_HIST_MAX = 4.0  # squared distance between unit vectors lies in [0, 4]


def fast_ap_masks(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Boolean ``(M, M)`` masks of positives (same label, not self) and negatives (other label)."""
    labels = labels.reshape(-1)
    same = labels[:, None] == labels[None, :]
    pos = same.clone()
    pos.fill_diagonal_(False)
    return pos, ~same


def _bin_index(
    x: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor, num_bins: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Squared distances' lower bins as column indices of a per-query table, and their fractions ``t``.

    ``D_ij = ||x_i||^2 + ||x_j||^2 - 2 x_i.x_j`` (not clamped, so Eq. 17 is its
    exact gradient).  With ``u = D / Delta``, ``b = floor(u)``, ``t = u - b``, the
    pair adds ``1 - t`` to bin ``b`` and ``t`` to bin ``b + 1``.  The table has
    three groups of ``num_bins + 4`` columns (positives, negatives, neither --
    the diagonal); inside a group, column ``b + 2`` holds lower bin
    ``b = -1 .. num_bins`` and columns 0 and ``num_bins + 3`` collect distances
    outside ``(-Delta, 4 + Delta)``, which touch no bin.
    """
    ncols = num_bins + 4
    sq = (x * x).sum(1)
    d = torch.addmm(sq[:, None] + sq[None, :], x, x.t(), alpha=-2.0)
    u = d.mul_(num_bins / _HIST_MAX)
    b = torch.floor(u)
    t = u.sub_(b)
    group = torch.where(pos, 2, torch.where(neg, ncols + 2, 2 * ncols + 2))
    idx = b.clamp_(-2, num_bins + 1).long().add_(group)
    return idx, t


class _FastAPFunction(torch.autograd.Function):
    """Per-query ``FastAP_i`` (Eq. 21) from embeddings, with the closed-form backward of Sec. C."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor, num_bins: int) -> torch.Tensor:
        m = x.shape[0]
        ncols = num_bins + 4
        idx, t = _bin_index(x, pos, neg, num_bins)
        count = x.new_zeros(m, 3 * ncols).scatter_add_(1, idx, x.new_ones(1).expand_as(t))
        tsum = x.new_zeros(m, 3 * ncols).scatter_add_(1, idx, t)
        count = count.view(m, 3, ncols)
        tsum = tsum.view(m, 3, ncols)
        # Soft histograms (Eq. 6-7): h_l = sum_{b = l} (1 - t) + sum_{b = l - 1} t.
        hist = count[:, :2, 2 : num_bins + 3] - tsum[:, :2, 2 : num_bins + 3] + tsum[:, :2, 1 : num_bins + 2]
        hp, hn = hist[:, 0], hist[:, 1]
        cum_p = hp.cumsum(1)
        cum = (hp + hn).cumsum(1)
        inv = torch.where(cum > 0, 1.0 / torch.where(cum > 0, cum, torch.ones_like(cum)), torch.zeros_like(cum))
        n_pos = pos.sum(1).to(x.dtype)
        inv_npos = torch.where(n_pos > 0, 1.0 / n_pos.clamp_min(1), torch.zeros_like(n_pos))
        fastap = (hp * cum_p * inv).sum(1) * inv_npos
        ctx.num_bins = num_bins
        ctx.save_for_backward(x, idx, hp, cum_p, inv, inv_npos)
        return fastap

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, None, None, None]:
        x, idx, hp, cum_p, inv, inv_npos = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        num_bins = ctx.num_bins
        m = x.shape[0]
        # Eq. 26-30: derivatives of F_i wrt h+_il and h-_il, via reverse cumulative sums.
        a = hp * inv  # h+_l / H_l
        c = a * cum_p * inv  # h+_l H+_l / H_l^2
        rev = lambda v: v.flip(1).cumsum(1).flip(1)  # noqa: E731  sum over l >= k
        g = torch.stack([cum_p * inv + rev(a - c), -rev(c)], 1)  # (m, 2, L)
        # Upstream gradient, 1/|P_i| and the soft-binning derivative 1/Delta in one per-query factor.
        g = g * (grad_out * inv_npos * (num_bins / _HIST_MAX))[:, None, None]
        # dF_i/dD_ij = (g_{b+1} - g_b) / Delta for lower bin b; bins outside 0..num_bins have g = 0.
        table = x.new_zeros(m, 3, num_bins + 4)
        gpad = torch.nn.functional.pad(g, (1, 1))  # bins -1 .. num_bins + 1
        table[:, :2, 1 : num_bins + 3] = gpad[:, :, 1:] - gpad[:, :, :-1]
        gd = table.view(m, -1).gather(1, idx)
        # Eq. 17: dD_ij/dx_i = 2 (x_i - x_j), and D is symmetric in (i, j).
        s = gd + gd.t()
        grad_x = torch.addmm(s.sum(1, keepdim=True) * x, s, x, alpha=-1.0).mul_(2.0)
        return grad_x, None, None, None


def fast_ap_per_query(
    embeddings: torch.Tensor, pos_mask: torch.Tensor, neg_mask: torch.Tensor, num_bins: int = 10
) -> torch.Tensor:
    """``FastAP_i`` (Eq. 21) of every row of ``embeddings`` (``(M,)``; 0 where a row has no positives).

    ``embeddings`` are used as given (normalise them first for PML's definition);
    ``pos_mask`` / ``neg_mask`` are boolean ``(M, M)`` (see :func:`fast_ap_masks`).
    The gradient is the closed form of Sec. C of the supplement. Under autocast it runs in float32 (the
    soft histogram's counts and their scatter sums need float32's range; half inputs come back as such).
    """
    if int(num_bins) < 2:
        raise ValueError(f"num_bins must be an integer >= 2, got {num_bins!r}")
    if embeddings.dim() != 2:
        raise ValueError(f"embeddings must be (M, d), got shape {tuple(embeddings.shape)}")
    return in_float32(_FastAPFunction.apply, embeddings, pos_mask.bool(), neg_mask.bool(), int(num_bins))


class FastAPLoss(BaseMetricLossFunction):
    """FastAP loss, ``1 - FastAP_i`` averaged over queries with positives (Eq. 21 of the FastAP paper).

    Same value as PML's ``FastAPLoss(num_bins)`` (squared L2 distances of
    L2-normalised embeddings, ``num_bins + 1`` triangular bins on ``[0, 4]``);
    the backward is closed-form (Sec. C.2-C.3) in ``O(M^2 d + M L)`` time and
    ``O(M^2 + M L)`` memory.  Queries without positives are skipped; queries
    without negatives count with loss 0 (PML's rule).  Miner ``indices_tuple``
    weights anchors like PML; ``ref_emb`` is not supported (as in PML).
    """

    def __init__(self, num_bins: int = 10, **kwargs: Any) -> None:
        if isinstance(num_bins, bool) or int(num_bins) != num_bins or num_bins < 2:
            raise ValueError(f"num_bins must be an integer >= 2, got {num_bins!r}")
        super().__init__(**kwargs)
        c_f.assert_distance_type(self, LpDistance, normalize_embeddings=True, p=2, power=2)
        self.num_bins = int(num_bins)
        self.num_edges = self.num_bins + 1
        self.add_to_recordable_attributes(list_of_names=["num_bins"], is_stat=False)

    def compute_loss(
        self,
        embeddings: torch.Tensor,
        labels: torch.Tensor,
        indices_tuple: Any,
        ref_emb: torch.Tensor | None,
        ref_labels: torch.Tensor | None,
    ) -> dict[str, Any]:
        c_f.labels_required(labels)
        c_f.ref_not_supported(embeddings, labels, ref_emb, ref_labels)
        miner_weights = lmu.convert_to_weights(indices_tuple, labels, dtype=embeddings.dtype)
        pos, neg = fast_ap_masks(labels)
        has_pos = pos.any(1)
        if not bool(has_pos.any()):
            return self.zero_losses()
        x = self.distance.normalize(embeddings)
        fastap = fast_ap_per_query(x, pos, neg, self.num_bins)
        losses = (1.0 - fastap[has_pos]) * miner_weights[has_pos]
        return {
            "loss": {
                "losses": losses,
                "indices": torch.where(has_pos)[0],
                "reduction_type": "element",
            }
        }

    def get_default_distance(self) -> LpDistance:
        return LpDistance(power=2)
