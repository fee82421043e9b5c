"""The standard DML losses of pytorch-metric-learning, registered with the papers' hyper-parameters.

Each factory's keyword defaults are the documented defaults (``loss_defaults``
reads them); its docstring names the source of each value.  Main source: the
thesis (Gurbuz, *Novel Optimization Models to Generalize Deep Metric Learning*,
METU 2022), Sec. 3.3.2.1 "Hyperparameters", which takes
them from the Bayesian search of Musgrave et al., "A Metric Learning Reality
Check" (ECCV 2020) and the original papers.  Where the thesis gives one value
per dataset, the default is the CUB-200 value and the others are listed, to be
set per dataset in configs.  Where the thesis gives none, the default is PML's
(which is the original paper's unless noted).

Extra keyword ``options`` go to the PML class: ``distance``, ``reducer``,
``embedding_regularizer``, ``embedding_reg_weight``, ``weight_regularizer``,
``weight_init_func``, ``collect_stats`` and the class's other arguments.
"""

from __future__ import annotations

import warnings
from typing import Any

from pytorch_metric_learning import losses as pml_losses

from dmlkit.losses.fast_ap_loss import FastAPLoss
from dmlkit.losses.npair_loss import NPairLoss
from dmlkit.losses.registry import register_loss
from dmlkit.losses.soft_triple_regularizer import MergingCentersRegularizer
from dmlkit.losses.triplet_margin_loss import TripletMarginLoss

# --------------------------------------------------------------------------- pair and tuple losses


@register_loss("contrastive", builds=pml_losses.ContrastiveLoss)
def contrastive(pos_margin: float = 0.0, neg_margin: float = 0.5, **options: Any) -> pml_losses.ContrastiveLoss:
    """Contrastive loss C1 (Hadsell et al. 2006): ``[d_ap - m+]_+ + [m- - d_an]_+`` on L2 distances.

    Defaults: ``neg_margin = 0.5`` -- thesis Sec. 3.3.2.1, C1: "We use 0.5 margin
    for all datasets"; ``pos_margin = 0`` (plain contrastive, no positive margin).
    The thesis adopts XBM's official implementation, which applies the 0.5 margin
    to cosine similarities (negatives with similarity > 0.5 are penalised); that
    form is ``create_loss("contrastive", pos_margin=1, neg_margin=0.5,
    distance=CosineSimilarity())`` (PML's mean over non-zero pairs instead of
    XBM's sum / batch size).
    """
    return pml_losses.ContrastiveLoss(pos_margin=pos_margin, neg_margin=neg_margin, **options)


@register_loss("contrastive_c2", builds=pml_losses.ContrastiveLoss)
def contrastive_c2(pos_margin: float = 0.0, neg_margin: float = 0.3841, **options: Any) -> pml_losses.ContrastiveLoss:
    """Contrastive loss with positive margin, C2 (Musgrave et al. 2020), on L2 distances.

    Defaults: thesis Sec. 3.3.2.1, C2, (m+, m-) for CUB = (0, 0.3841).
    Other datasets: Cars196 (0.2652, 0.5409); In-shop (0.2858, 0.5130); SOP (0.2858, 0.5130).
    """
    return pml_losses.ContrastiveLoss(pos_margin=pos_margin, neg_margin=neg_margin, **options)


@register_loss("triplet", builds=TripletMarginLoss)
def triplet(margin: float = 0.0961, triplets_per_anchor: Any = "all", **options: Any) -> TripletMarginLoss:
    """Triplet margin loss (Weinberger & Saul 2009; Schroff et al. 2015): ``[d_ap - d_an + m]_+``.

    Defaults: ``margin = 0.0961`` -- thesis Sec. 3.3.2.1, Triplet, CUB.  Other
    datasets: Cars196 0.1190, In-shop 0.0451, SOP 0.0451.  ``triplets_per_anchor
    = "all"`` (all triplets of the batch) is PML's default.  PML's class, with all
    triplets enumerated without its batch x references^2 mask (``triplet_margin_loss``).
    """
    return TripletMarginLoss(margin=margin, triplets_per_anchor=triplets_per_anchor, **options)


@register_loss("margin", builds=pml_losses.MarginLoss)
def margin(
    margin: float = 0.2,
    nu: float = 0.0,
    beta: float = 1.2,
    learn_beta: bool = False,
    class_specific_beta: bool = False,
    triplets_per_anchor: Any = "all",
    num_classes: int | None = None,
    **options: Any,
) -> pml_losses.MarginLoss:
    """Margin loss (Wu et al., "Sampling Matters in Deep Embedding Learning", ICCV 2017, Eq. 5).

    ``[alpha + y_ij (D_ij - beta)]_+`` with margin ``alpha`` and boundary ``beta``.
    Defaults (the paper's, also PML's): ``margin = 0.2``, ``beta = 1.2``
    (initial boundary), ``nu = 0`` (no beta regulariser).  The paper learns beta
    (``learn_beta=True``; with ``class_specific_beta=True`` one beta per class,
    which needs ``num_classes``; a learnt beta is a parameter of the loss) and
    samples with distance-weighted sampling (``create_miner("distance_weighted")``);
    neither is on by default here (PML defaults).
    """
    if class_specific_beta and num_classes is None:
        raise ValueError("margin loss with class_specific_beta=True needs num_classes")
    return pml_losses.MarginLoss(
        margin=margin,
        nu=nu,
        beta=beta,
        learn_beta=learn_beta,
        triplets_per_anchor=triplets_per_anchor,
        num_classes=num_classes if class_specific_beta else None,
        **options,
    )


@register_loss("multi_similarity", builds=pml_losses.MultiSimilarityLoss, default_miner="multi_similarity")
def multi_similarity(
    alpha: float = 2.0, beta: float = 40.0, base: float = 0.5, **options: Any
) -> pml_losses.MultiSimilarityLoss:
    """Multi-similarity loss (Wang et al., CVPR 2019, Eq. 12) on cosine similarities.

    Defaults: thesis Sec. 3.3.2.1, MS, (alpha, beta, lambda) for CUB = (2, 40, 0.5)
    (``base`` is lambda).  Other datasets: Cars196 (14.35, 75.83, 0.66); In-shop
    (8.49, 57.38, 0.41); SOP (2, 40, 0.5).  Used with the MS miner (default miner
    ``multi_similarity``, epsilon = 0.1).
    """
    return pml_losses.MultiSimilarityLoss(alpha=alpha, beta=beta, base=base, **options)


@register_loss("npair", builds=NPairLoss)
def npair(**options: Any) -> NPairLoss:
    """N-pair loss (Sohn, NeurIPS 2016): softmax over one positive per class against the other classes' positives.

    No hyper-parameters (PML), which scores l2-normalised embeddings.  Sohn scores unnormalised ones and adds
    an L2 penalty on them; in a config: ``model.normalize: none`` and ``loss.params: {distance: {name: dot,
    normalize_embeddings: false}, embedding_regularizer: {name: lp, power: 2}, embedding_reg_weight: 0.001}``
    (configs/font_testbed/font_testbed_npair_sohn.yaml).
    Uses one positive pair per label in the batch. PML's loss value for value, and it also takes
    ``ref_emb`` (positives from a reference batch; SFT's joint scoring): :mod:`dmlkit.losses.npair_loss`.
    """
    return NPairLoss(**options)


@register_loss("lifted_structure", builds=pml_losses.LiftedStructureLoss)
def lifted_structure(
    neg_margin: float = 1.0, pos_margin: float = 0.0, **options: Any
) -> pml_losses.LiftedStructureLoss:
    """Lifted structured loss (Oh Song et al., CVPR 2016, Eq. 4) on L2 distances.

    Defaults: ``neg_margin = 1`` (the paper's alpha = 1, also PML's), ``pos_margin = 0``.
    """
    return pml_losses.LiftedStructureLoss(neg_margin=neg_margin, pos_margin=pos_margin, **options)


@register_loss("ranked_list", builds=pml_losses.RankedListLoss)
def ranked_list(
    margin: float = 0.4,
    Tn: float = 10.0,  # noqa: N803 -- PML's argument name
    imbalance: float = 0.5,
    alpha: float | None = None,
    Tp: float = 0.0,  # noqa: N803
    **options: Any,
) -> pml_losses.RankedListLoss:
    """Ranked list loss (Wang et al., CVPR 2019), RLL-Simpler variant (``Tp = 0``), on L2 distances.

    Negatives closer than ``alpha`` and positives farther than ``alpha - margin``
    are penalised, negatives weighted by ``exp(Tn (alpha - d))``.  No seed gives
    its hyper-parameters and PML has no defaults for ``margin`` and ``Tn``; the
    defaults are those reported in the RLL paper as we read it: ``margin = 0.4``,
    ``alpha = 1.2`` (PML's ``alpha=None`` gives ``1 + margin/2 = 1.2``), ``Tn =
    10``; ``imbalance = 0.5`` and ``Tp = 0`` are PML's.  Check them against the
    paper before quoting results.  PML warns that ``Tn > 5`` may overflow; here
    ``Tn * (alpha - d) <= 12``, so ``exp`` stays finite in float32 and that
    warning is silenced for ``Tn <= 10``.
    """
    with warnings.catch_warnings():
        if Tn <= 10 and Tp <= 10:
            warnings.filterwarnings("ignore", message="Values of Tp or Tn are too high")
        return pml_losses.RankedListLoss(margin=margin, Tn=Tn, imbalance=imbalance, alpha=alpha, Tp=Tp, **options)


@register_loss("fastap", builds=FastAPLoss)
def fastap(num_bins: int = 10, **options: Any) -> FastAPLoss:
    """FastAP (Cakir et al., "Deep Metric Learning to Rank", CVPR 2019): AP with soft histogram binning.

    The histogram of squared L2 distances of each query (FastAP supplement,
    Sec. C.1) has ``num_bins`` bins, the method's only parameter; default 10
    (PML's default). dmlkit's ``FastAPLoss`` has PML's value and the closed-form
    gradient of Sec. C.2-C.3 (``dmlkit.losses.fast_ap_loss``).
    """
    return FastAPLoss(num_bins=num_bins, **options)


# --------------------------------------------------------------------------- proxy and classifier losses


@register_loss("proxy_nca", builds=pml_losses.ProxyNCALoss)
def proxy_nca(
    num_classes: int, embedding_size: int, softmax_scale: float = 10.0, **options: Any
) -> pml_losses.ProxyNCALoss:
    """ProxyNCA (Movshovitz-Attias et al. 2017) as in ProxyNCA++ (Teh et al. 2020): softmax over all proxies.

    Logits ``-softmax_scale * ||x/|x| - p/|p| ||^2`` (PML: squared L2 on normalised
    vectors, positive proxy included in the denominator as in ProxyNCA++).
    Default ``softmax_scale = 10 = 1/T`` -- thesis Sec. 3.3.2.1, ProxyNCA++:
    "temperature parameter to 0.1 for all datasets".  The proxies are a
    parameter (thesis: learning-rate multiplier 100 for them).
    """
    return pml_losses.ProxyNCALoss(num_classes, embedding_size, softmax_scale=softmax_scale, **options)


@register_loss("proxy_anchor", builds=pml_losses.ProxyAnchorLoss)
def proxy_anchor(
    num_classes: int, embedding_size: int, margin: float = 0.1, alpha: float = 32.0, **options: Any
) -> pml_losses.ProxyAnchorLoss:
    """Proxy-Anchor loss (Kim et al., CVPR 2020, Eq. 4) on cosine similarities.

    Defaults: thesis Sec. 3.3.2.1, ProxyAnchor: (delta, alpha) = (0.1, 32) for all
    datasets (``margin`` is delta); also the paper's and PML's.  The proxies are
    a parameter (thesis: learning-rate multiplier 100, one epoch of warm-up).
    """
    return pml_losses.ProxyAnchorLoss(num_classes, embedding_size, margin=margin, alpha=alpha, **options)


@register_loss("soft_triple", builds=pml_losses.SoftTripleLoss)
def soft_triple(
    num_classes: int,
    embedding_size: int,
    centers_per_class: int = 10,
    la: float = 20.0,
    gamma: float = 0.1,
    margin: float = 0.01,
    tau: float = 0.2,
    **options: Any,
) -> pml_losses.SoftTripleLoss:
    """SoftTriple loss (Qian et al., ICCV 2019, Eq. 10-12) with its centre regulariser.

    Defaults: thesis Sec. 3.3.2.1, SoftTriple, (lambda, gamma, tau, delta) for CUB =
    (20, 0.1, 0.2, 0.01) -> ``la``, ``gamma`` (PML divides by it, as the paper's
    1/gamma), ``tau``, ``margin``.  Other datasets: Cars196 (17.69, 19.18, 0.0669,
    0.3588); In-shop (20, 0.1, 0.2, 0.01); SOP (100, 47.9, 0.2, 0.3145).
    ``centers_per_class = 10`` is K of the SoftTriple paper (and PML's default;
    the thesis' "SoftTriple-L" on CUB/Cars; "-S" is 1).  ``tau`` weighs the
    paper's regulariser merging similar centres of a class (Eq. 13, our
    ``MergingCentersRegularizer``: PML's ``SparseCentersRegularizer`` turns NaN
    once two centres meet); it is off when ``tau = 0`` or with one centre.
    """
    if tau < 0:
        raise ValueError(f"soft_triple tau must be >= 0, got {tau}")
    if tau > 0 and centers_per_class > 1:
        if "weight_regularizer" in options:
            raise ValueError("soft_triple: pass tau=0 when giving your own weight_regularizer")
        options["weight_regularizer"] = MergingCentersRegularizer(num_classes, centers_per_class)
        options["weight_reg_weight"] = tau
    return pml_losses.SoftTripleLoss(
        num_classes, embedding_size, centers_per_class=centers_per_class, la=la, gamma=gamma, margin=margin, **options
    )


@register_loss("normalized_softmax", builds=pml_losses.NormalizedSoftmaxLoss)
def normalized_softmax(
    num_classes: int, embedding_size: int, temperature: float = 0.05, **options: Any
) -> pml_losses.NormalizedSoftmaxLoss:
    """Normalised softmax (Zhai & Wu, "Classification is a Strong Baseline for DML", BMVC 2019).

    Cross-entropy on cosine logits divided by ``temperature``; default 0.05 (the
    paper's and PML's).
    """
    return pml_losses.NormalizedSoftmaxLoss(num_classes, embedding_size, temperature=temperature, **options)


@register_loss("cosface", builds=pml_losses.CosFaceLoss)
def cosface(
    num_classes: int, embedding_size: int, margin: float = 0.35, scale: float = 64.0, **options: Any
) -> pml_losses.CosFaceLoss:
    """CosFace / large-margin cosine loss (Wang et al., CVPR 2018): logits ``s (cos - m)`` for the target.

    Defaults: ``scale = 64``, ``margin = 0.35`` (the paper's and PML's).
    """
    return pml_losses.CosFaceLoss(num_classes, embedding_size, margin=margin, scale=scale, **options)


@register_loss("arcface", builds=pml_losses.ArcFaceLoss)
def arcface(
    num_classes: int, embedding_size: int, margin: float = 28.6, scale: float = 64.0, **options: Any
) -> pml_losses.ArcFaceLoss:
    """ArcFace / additive angular margin loss (Deng et al., CVPR 2019): logits ``s cos(theta + m)`` for the target.

    Defaults: ``scale = 64``, ``margin = 28.6`` degrees (= the paper's 0.5 rad;
    PML takes degrees).
    """
    return pml_losses.ArcFaceLoss(num_classes, embedding_size, margin=margin, scale=scale, **options)
