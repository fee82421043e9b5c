"""Class centres for feature transforms: the centre estimate of Sec. 3.5 (Eq. 9) of the SFT paper.

Both SFT (Eq. 3-4) and the translation transform (Eq. 2) need the centre ``mu_j`` of
every class. :class:`ClassCenters` keeps them in buffers (so they are saved and restored
with ``state_dict``) and updates them once per mini-batch (line 6 of Algorithm 1).

Modes (the three rows of Table 6, "Impact of center estimation"):

* ``"update"`` (SFT): Eq. 9, the centre-loss style update of Wen et al. (2016)
  ``Delta mu_j = sum_i [y_i = j] (mu_j - x_i) / (1 + sum_i [y_i = j])`` and
  ``mu_j <- mu_j - alpha * Delta mu_j``. The paper states only ``Delta mu_j`` and no step, so
  Eq. 9 read literally is ``alpha = 1`` (the default): ``mu_j <- (mu_j + sum_i x_i) / (1 + n_j)``,
  the old centre counted as one more sample. A smaller ``alpha`` (the centre loss paper uses
  0.5) keeps more of the old centre: less noise from the 3 images of a batch, more lag behind a
  feature space that moves during training. A class seen for the first time has no ``mu_j`` to
  update; its centre is initialised to the mean of its features in that batch.
* ``"random"`` ("Random": skip the centre estimation step): every centre is a random unit
  vector drawn at construction from the given generator and never updated.
* ``"pick"`` ("Pick": randomly pick one sample from the same class as centre): at every
  update the centre of each class in the batch is replaced by one of its features, chosen
  uniformly with the given generator.

Start (``set_means``): by default a class has no centre until its first batch (the first Eq. 9
step starts it at the batch mean). ``set_means(sums, counts)`` starts every class at its mean over
any set of features instead (the training tool's ``methods.sft.init_centers: data``: the whole
training split under the initial network, before the first step); ``class_sums`` gives the sums
and counts, which add over batches and over processes (an all-reduce), so the means of a whole
training set are taken batch by batch.

Features are detached: the centres carry no gradient. Randomness comes only from the
``torch.Generator`` passed in (a private one seeded with 0 if none is given), never from
the global RNG.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

__all__ = ["CENTER_INITS", "CENTER_MODES", "ClassCenters", "class_sums"]

CENTER_MODES = ("update", "random", "pick")
#: How the centres start: ``"none"`` (each class at its first batch) or ``"data"`` (the training set's class means).
CENTER_INITS = ("none", "data")
Mode = Literal["update", "random", "pick"]


@torch.no_grad()
def class_sums(features: Tensor, labels: Tensor, num_classes: int) -> tuple[Tensor, Tensor]:
    """Per-class sums ``(C, d)`` and counts ``(C,)`` of ``features`` ``(B, d)``, both float64, on the features' device.

    They add over batches and processes, so ``set_means(sum of sums, sum of counts)`` starts the
    centres at class means taken over a whole data set in batches (see :meth:`ClassCenters.set_means`).
    """
    if not isinstance(features, Tensor) or features.dim() != 2:
        shape = tuple(features.shape) if isinstance(features, Tensor) else type(features).__name__
        raise ValueError(f"features must have shape (B, d), got {shape}")
    if not isinstance(labels, Tensor) or labels.dim() != 1 or labels.shape[0] != features.shape[0]:
        raise ValueError(f"labels must be a 1-D tensor with one class index per feature ({features.shape[0]})")
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise ValueError(f"labels must be an integer tensor, got {labels.dtype}")
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise ValueError(
            f"labels must lie in [0, {num_classes}), got range [{int(labels.min())}, {int(labels.max())}]: "
            "remap labels to 0..C-1 or raise num_classes"
        )
    x = features.detach().to(torch.float64)
    labels = labels.to(device=x.device, dtype=torch.long)
    sums = torch.zeros(num_classes, x.shape[1], dtype=torch.float64, device=x.device).index_add_(0, labels, x)
    counts = torch.bincount(labels, minlength=num_classes).to(torch.float64)
    return sums, counts


class ClassCenters(nn.Module):
    """Per-class feature centres, updated per mini-batch with Eq. 9 of the SFT paper.

    Args:
        num_classes: number of classes ``C`` (labels are ``0 .. C-1``).
        dim: feature dimension ``d``.
        alpha: step size of the Eq. 9 update, ``mu_j <- mu_j - alpha * Delta mu_j``, in ``(0, 1]``.
        mode: ``"update"`` (Eq. 9), ``"random"`` (fixed random unit centres) or ``"pick"``
            (a random sample of the class); see the module docstring.
        generator: source of randomness for ``"random"`` and ``"pick"`` (CPU generator).

    Buffers: ``centers`` ``(C, d)`` and ``initialized`` ``(C,)`` (bool).
    """

    centers: Tensor
    initialized: Tensor

    def __init__(
        self,
        num_classes: int,
        dim: int,
        alpha: float = 1.0,
        mode: Mode = "update",
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if int(num_classes) != num_classes or num_classes < 1:
            raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
        if int(dim) != dim or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        if not 0.0 < float(alpha) <= 1.0:
            raise ValueError(f"alpha must lie in (0, 1] (Eq. 9 step size; 1 is Eq. 9 as written), got {alpha!r}")
        if mode not in CENTER_MODES:
            raise ValueError(f"unknown mode {mode!r}: choose one of {CENTER_MODES}")
        self.num_classes = int(num_classes)
        self.dim = int(dim)
        self.alpha = float(alpha)
        self.mode: Mode = mode
        self.generator = generator if generator is not None else torch.Generator().manual_seed(0)
        self.register_buffer("centers", torch.zeros(self.num_classes, self.dim))
        self.register_buffer("initialized", torch.zeros(self.num_classes, dtype=torch.bool))
        if mode == "random":
            c = torch.randn(self.num_classes, self.dim, generator=self.generator)
            self.centers.copy_(torch.nn.functional.normalize(c, dim=1))
            self.initialized.fill_(True)

    def extra_repr(self) -> str:
        return f"num_classes={self.num_classes}, dim={self.dim}, alpha={self.alpha}, mode={self.mode!r}"

    def _check_labels(self, labels: Tensor, n: int | None = None) -> Tensor:
        if not isinstance(labels, Tensor) or labels.dim() != 1:
            raise ValueError("labels must be a 1-D tensor of class indices")
        if labels.dtype.is_floating_point or labels.dtype == torch.bool:
            raise ValueError(f"labels must be an integer tensor, got {labels.dtype}")
        if n is not None and labels.shape[0] != n:
            raise ValueError(f"got {n} features but {labels.shape[0]} labels: pass one label per feature")
        if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= self.num_classes):
            raise ValueError(
                f"labels must lie in [0, {self.num_classes}), got range [{int(labels.min())}, {int(labels.max())}]: "
                "remap labels to 0..C-1 or raise num_classes"
            )
        return labels.to(device=self.centers.device, dtype=torch.long)

    @torch.no_grad()
    def update(self, features: Tensor, labels: Tensor) -> None:
        """One centre step with a mini-batch (line 6 of Algorithm 1): Eq. 9, or the ``pick`` rule.

        Args:
            features: ``(B, d)`` features (detached internally), in the space where the
                transform is applied (normalised embeddings for SFT, pre-normalisation
                embeddings for SFT-d).
            labels: ``(B,)`` integer class indices.
        """
        if not isinstance(features, Tensor) or features.dim() != 2 or features.shape[1] != self.dim:
            shape = tuple(features.shape) if isinstance(features, Tensor) else type(features).__name__
            raise ValueError(f"features must have shape (B, {self.dim}), got {shape}")
        if not torch.isfinite(features).all():
            raise ValueError(
                "features contain NaN or inf: the centres would be corrupted; check the embedding model/loss"
            )
        labels = self._check_labels(labels, features.shape[0])
        x = features.detach().to(device=self.centers.device, dtype=self.centers.dtype)
        if self.mode == "random" or x.shape[0] == 0:
            return
        if self.mode == "pick":
            for j in torch.unique(labels).tolist():
                idx = torch.nonzero(labels == j).flatten()
                pick = int(torch.randint(idx.numel(), (1,), generator=self.generator))
                self.centers[j] = x[idx[pick]]
                self.initialized[j] = True
            return
        counts = torch.bincount(labels, minlength=self.num_classes).to(x.dtype).unsqueeze(1)
        sums = torch.zeros_like(self.centers).index_add_(0, labels, x)
        present = counts.squeeze(1) > 0
        new = present & ~self.initialized
        old = present & self.initialized
        delta = (counts * self.centers - sums) / (1.0 + counts)  # Eq. 9
        self.centers[old] -= self.alpha * delta[old]
        self.centers[new] = sums[new] / counts[new]
        self.initialized |= present

    @torch.no_grad()
    def batch_cosine(self, features: Tensor, labels: Tensor) -> Tensor:
        """Centre lag: mean over the batch's classes with a centre of ``cos(mu_j, mean of the batch's x of class j)``.

        Call it before :meth:`update` to measure the centres the transform used. A 0-d tensor (no
        host sync), NaN when no class of the batch has a centre yet.
        """
        labels = self._check_labels(labels, features.shape[0])
        present, inverse = torch.unique(labels, return_inverse=True)
        x = features.detach().to(device=self.centers.device, dtype=self.centers.dtype)
        sums = torch.zeros(present.numel(), self.dim, dtype=x.dtype, device=x.device).index_add_(0, inverse, x)
        known = self.initialized[present].to(x.dtype)
        cos = torch.nn.functional.cosine_similarity(self.centers[present], sums, dim=1)
        return (cos * known).sum() / known.sum()

    @torch.no_grad()
    def set_means(self, sums: Tensor, counts: Tensor) -> Tensor:
        """Start each class at its mean, ``mu_j <- sums_j / counts_j``, where ``counts_j > 0``; returns those classes' mask.

        ``sums`` ``(C, d)`` and ``counts`` ``(C,)`` are per-class sums and counts of features in the
        transform's space (:func:`class_sums`, added over batches and processes). The classes set are
        marked initialised; a class with count 0 keeps its state (no centre, or its current one). The
        ``"random"`` mode keeps its fixed random centres (Table 6) and refuses.
        """
        if self.mode == "random":
            raise ValueError(
                "mode 'random' keeps fixed random centres (Table 6, 'Random'): starting them at class means "
                "contradicts it; use mode 'update' or 'pick' (in a config: methods.sft.centers), or do not set the means"
            )
        if not isinstance(sums, Tensor) or tuple(sums.shape) != (self.num_classes, self.dim):
            shape = tuple(sums.shape) if isinstance(sums, Tensor) else type(sums).__name__
            raise ValueError(
                f"sums must have shape ({self.num_classes}, {self.dim}) (class_sums gives it), got {shape}"
            )
        if not isinstance(counts, Tensor) or tuple(counts.shape) != (self.num_classes,):
            shape = tuple(counts.shape) if isinstance(counts, Tensor) else type(counts).__name__
            raise ValueError(f"counts must have shape ({self.num_classes},) (class_sums gives it), got {shape}")
        if not torch.isfinite(sums).all() or not torch.isfinite(counts).all() or bool((counts < 0).any()):
            raise ValueError("sums must be finite and counts finite and >= 0: check the features the means come from")
        counts = counts.to(self.centers.device)
        present = counts > 0
        means = sums.to(device=self.centers.device, dtype=torch.float64) / counts.to(torch.float64).clamp(
            min=1
        ).unsqueeze(1)
        self.centers[present] = means[present].to(self.centers.dtype)
        self.initialized |= present
        return present

    def get(self, labels: Tensor) -> Tensor:
        """Centres of ``labels``: ``(B,)`` -> ``(B, d)``. Raises ``ValueError`` for a class without a centre."""
        labels = self._check_labels(labels)
        missing = labels[~self.initialized[labels]]
        if missing.numel():
            names = sorted(set(missing.tolist()))
            raise ValueError(
                f"class(es) {names[:10]}{' ...' if len(names) > 10 else ''} have no centre yet: "
                "call update() with a batch containing them first (or only transform into classes "
                "whose centre is initialised, see `initialized`)"
            )
        return self.centers[labels]

    def forward(self, labels: Tensor) -> Tensor:
        """Same as :meth:`get`."""
        return self.get(labels)
