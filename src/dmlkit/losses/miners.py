"""Miners of pytorch-metric-learning (and dmlkit's batched distance-weighted sampling), registered with documented
defaults.

A miner maps ``(embeddings, labels[, ref_emb, ref_labels])`` to an indices tuple
(pairs ``(a1, p, a2, n)`` or triplets ``(a, p, n)``) that a loss then uses.
Extra keyword ``options`` go to the PML class (``distance``, ``collect_stats``).
"""

from __future__ import annotations

from typing import Any

from pytorch_metric_learning import miners as pml_miners

from dmlkit.losses.distance_weighted_miner import DistanceWeightedMiner
from dmlkit.losses.registry import register_miner


@register_miner("multi_similarity", builds=pml_miners.MultiSimilarityMiner)
def multi_similarity(epsilon: float = 0.1, **options: Any) -> pml_miners.MultiSimilarityMiner:
    """Pair mining of the MS loss (Wang et al., CVPR 2019, Eq. 5-6) on cosine similarities.

    Keeps negatives more similar than the hardest positive minus ``epsilon`` and
    positives less similar than the hardest negative plus ``epsilon``;
    ``epsilon = 0.1`` (the MS paper's and PML's).
    """
    return pml_miners.MultiSimilarityMiner(epsilon=epsilon, **options)


@register_miner("triplet_margin", builds=pml_miners.TripletMarginMiner)
def triplet_margin(margin: float = 0.2, type_of_triplets: str = "all", **options: Any) -> pml_miners.TripletMarginMiner:
    """Triplets violating ``d_an - d_ap <= margin`` (``type_of_triplets``: all, hard, semihard, easy).

    Defaults: PML's (``margin = 0.2``, the FaceNet margin of Schroff et al. 2015).
    """
    return pml_miners.TripletMarginMiner(margin=margin, type_of_triplets=type_of_triplets, **options)


@register_miner("batch_hard", builds=pml_miners.BatchHardMiner)
def batch_hard(**options: Any) -> pml_miners.BatchHardMiner:
    """Hardest positive and hardest negative per anchor (Hermans et al., "In Defense of the Triplet Loss", 2017)."""
    return pml_miners.BatchHardMiner(**options)


@register_miner("distance_weighted", builds=DistanceWeightedMiner)
def distance_weighted(
    cutoff: float = 0.5, nonzero_loss_cutoff: float = 1.4, seed: int | None = None, **options: Any
) -> DistanceWeightedMiner:
    """Distance-weighted sampling (Wu et al., ICCV 2017, Eq. 4), the sampler of the margin loss.

    dmlkit's batched form of PML's miner (``dmlkit.losses.distance_weighted_miner``): the same sampling, a private
    generator (``seed``; by default the run's). Defaults: ``cutoff = 0.5`` (the paper's lambda = 0.5 clipping of
    the distances) and ``nonzero_loss_cutoff = 1.4`` (PML's / the paper's reference code); embeddings are
    L2-normalised.
    """
    return DistanceWeightedMiner(cutoff=cutoff, nonzero_loss_cutoff=nonzero_loss_cutoff, seed=seed, **options)


@register_miner("pair_margin", builds=pml_miners.PairMarginMiner)
def pair_margin(pos_margin: float = 0.2, neg_margin: float = 0.8, **options: Any) -> pml_miners.PairMarginMiner:
    """Positive pairs farther than ``pos_margin`` and negative pairs closer than ``neg_margin`` (PML defaults)."""
    return pml_miners.PairMarginMiner(pos_margin=pos_margin, neg_margin=neg_margin, **options)
