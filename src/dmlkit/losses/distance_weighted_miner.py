"""Distance-weighted sampling (Wu et al., "Sampling Matters in Deep Embedding Learning", ICCV 2017), batched.

Every anchor ``a`` of a class with ``n_p`` members in the reference set gets ``n_p`` triplets ``(a, p, n)``: ``p``
uniform among its class's other members, ``n`` drawn from the other classes with probability proportional to the
inverse of the density of distances between points uniform on the unit sphere in ``d`` dimensions (Sec. 4):

    q(s)^-1 ∝ s^(2-d) * (1 - s^2 / 4)^((3-d) / 2),     s = max(||x_a - x_n||, cutoff)           (Wu et al., Eq. 4)

and zero for pairs at distance ``nonzero_loss_cutoff`` or more (they give no margin-loss gradient). This is the
sampling of pytorch-metric-learning's ``DistanceWeightedMiner`` (same weights, same triplets per anchor, the same
skipped anchors), drawn in two ``torch.multinomial`` calls instead of a loop over the classes: PML's loop
synchronises with the device several times per class (0.32 s a step on a GPU against multi-similarity's 0.05,
``docs/device.md``) and draws from torch's global generator. Here the draws come from a private
``torch.Generator`` seeded at construction (by default with the seed the run's model is built under), so a fixed
seed reproduces the triplets and the global random state is left alone.
"""

from __future__ import annotations

import torch
from pytorch_metric_learning.distances import LpDistance
from pytorch_metric_learning.miners import BaseMiner
from pytorch_metric_learning.utils import common_functions as c_f

__all__ = ["DistanceWeightedMiner", "distance_weights"]


def distance_weights(
    distances: torch.Tensor, same_class: torch.Tensor, dim: int, cutoff: float, nonzero_loss_cutoff: float
) -> torch.Tensor:
    """Each row's sampling probabilities of the negatives (Eq. 4 above), summing to one; a row with no eligible
    negative is all zeros (its anchor gets no triplet)."""
    clamped = distances.clamp(min=cutoff)
    log_weights = (2.0 - dim) * clamped.log() - ((dim - 3) / 2) * torch.log(1.0 - 0.25 * clamped**2)
    undefined = ~torch.isfinite(log_weights)  # s = 2 exactly (antipodal points), or a NaN distance
    log_weights = log_weights.masked_fill(same_class | undefined, 0.0)
    top = log_weights[~undefined].max() if bool((~undefined).any()) else log_weights.new_zeros(())
    weights = torch.exp(log_weights - top)  # divided by the largest weight: no overflow at d = 128 or 512
    weights = weights * (~same_class & ~undefined & (distances < nonzero_loss_cutoff)).to(weights.dtype)
    total = weights.sum(dim=1, keepdim=True)
    return torch.where(total > 0, weights / total.clamp(min=torch.finfo(weights.dtype).tiny), torch.zeros_like(weights))


class DistanceWeightedMiner(BaseMiner):
    """Triplets ``(a, p, n)`` with negatives drawn by distance-weighted sampling (module docstring).

    Args:
        cutoff: the smallest distance the weights see (the paper's lambda = 0.5 clipping).
        nonzero_loss_cutoff: negatives this far or farther are never drawn (PML's and the reference code's 1.4).
        seed: seed of the private generator; ``None`` takes ``torch.initial_seed()``, which the model builder sets to
            the run's seed while it builds the loss.
    """

    def __init__(
        self, cutoff: float = 0.5, nonzero_loss_cutoff: float = 1.4, seed: int | None = None, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        c_f.assert_distance_type(self, LpDistance, p=2, power=1, normalize_embeddings=True)
        if not 0 <= cutoff < nonzero_loss_cutoff:
            raise ValueError(
                f"distance_weighted needs 0 <= cutoff < nonzero_loss_cutoff, got cutoff={cutoff} and "
                f"nonzero_loss_cutoff={nonzero_loss_cutoff}; the paper's are 0.5 and 1.4"
            )
        self.cutoff = float(cutoff)
        self.nonzero_loss_cutoff = float(nonzero_loss_cutoff)
        self.generator = torch.Generator().manual_seed(torch.initial_seed() if seed is None else int(seed))
        self._device_generators: dict[torch.device, torch.Generator] = {}
        self.add_to_recordable_attributes(list_of_names=["cutoff", "nonzero_loss_cutoff"], is_stat=False)

    def _generator(self, device: torch.device) -> torch.Generator:
        """The private generator on ``device`` (an accelerator's is seeded once from the CPU one)."""
        if device.type == "cpu":
            return self.generator
        if device not in self._device_generators:
            seed = int(torch.randint(2**62, (1,), generator=self.generator))
            self._device_generators[device] = torch.Generator(device=device).manual_seed(seed)
        return self._device_generators[device]

    def mine(
        self, embeddings: torch.Tensor, labels: torch.Tensor, ref_emb: torch.Tensor, ref_labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        self_reference = ref_labels is labels  # PML's test: the batch against itself, an anchor is not its positive
        same_class = labels.unsqueeze(1) == ref_labels.unsqueeze(0)
        weights = distance_weights(
            self.distance(embeddings, ref_emb).float(),
            same_class,
            embeddings.size(1),
            self.cutoff,
            self.nonzero_loss_cutoff,
        )
        positives = same_class.clone()
        if self_reference:
            positives.fill_diagonal_(False)
        class_size = same_class.sum(dim=1)  # n_p: the triplets an anchor gets
        eligible = positives.any(dim=1) & (weights.sum(dim=1) > 0)
        anchors = torch.repeat_interleave(
            torch.arange(labels.numel(), device=labels.device),
            torch.where(eligible, class_size, torch.zeros_like(class_size)),
        )
        if anchors.numel() == 0:
            empty = torch.empty(0, dtype=torch.long, device=labels.device)
            return empty, empty.clone(), empty.clone()
        g = self._generator(embeddings.device)
        p = torch.multinomial(positives[anchors].float(), 1, replacement=True, generator=g).flatten()
        n = torch.multinomial(weights[anchors], 1, replacement=True, generator=g).flatten()
        return anchors, p, n
