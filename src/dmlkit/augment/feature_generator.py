"""The generated batch of the SFT paper: class centres, target classes and the transform (Algorithm 1, lines 5-6).

``FeatureGenerator`` holds what a feature augmenter needs besides the loss: the class
centres (Eq. 9, :class:`~dmlkit.augment.centers.ClassCenters`), the head/tail split of the
unbalanced scheme and a private ``torch.Generator``. ``step(features, labels)`` runs lines
5 and 6 of Algorithm 1 in the paper's order:

1. (line 5) each feature ``x_i`` gets a target class ``t_i`` by the scheme of Sec. 3.5
   (:mod:`dmlkit.augment.schemes`) and becomes ``x_gen,i = T(x_i, mu_{y_i}, mu_{t_i})`` with
   ``T`` the spherical transform (Eq. 3-4), its degenerate form (SFT-d, Sec. 3.4) or the
   translation (Eq. 2); ``y_gen,i = t_i``. The centres are constants; the gradient flows
   through ``x_i`` only.
2. (line 6) the centres are updated with the batch (detached). ``update_centers_first=True``
   swaps the two lines.

Classes without a centre are never targets, and a feature whose own class has no centre is not
transformed; such features are dropped from the generated batch. Which other class a feature goes
to is the target policy (``"batch"``, ``"shared"``, ``"all"``; :mod:`dmlkit.augment.schemes` says
how "randomly choose a different class" is read and why ``"batch"`` is the default).

``start_step`` delays the augmentation: the first ``start_step`` calls of ``step`` only update
the centres (Sec. 3.5: "the augmentation process relies on a well trained feature space"), so the
generated batch starts from warm centres. After each ``step``, ``last_num_generated`` and
``last_center_cosine`` (the centre lag: mean cosine between the centres before the batch's update
and the batch's class means, :meth:`~dmlkit.augment.centers.ClassCenters.batch_cosine`) describe it.

``transform_space(embeddings)`` says in which space the centres and the transform live:
the unnormalised embeddings for SFT-d (Proposition 2: translate before normalisation, then
re-project), the L2-normalised ones when ``normalize_input`` is set, the input otherwise.

The RNG state and the step count are the module's extra state, so a ``state_dict`` round trip resumes
the same random stream. Used by :class:`~dmlkit.augment.augmented_loss.FeatureAugmentedLoss`
(a PML-signature loss wrapper) and by the SFT method of the training tool (its own objective term).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dmlkit.augment.centers import ClassCenters
from dmlkit.augment.schemes import NO_TARGET, draw_targets, mask_head, split_head_tail
from dmlkit.augment.sft import degenerate_transform, spherical_transform, translation_transform
from dmlkit.augment.sft_config import AUGMENT_TRANSFORMS, SFTConfig, canonical_transform_name

__all__ = ["AUGMENT_TRANSFORMS", "FeatureGenerator", "canonical_transform_name"]

_TRANSFORMS = {"sft": spherical_transform, "sft_d": degenerate_transform, "translation": translation_transform}


class FeatureGenerator(nn.Module):
    """Class centres + target scheme + transform: ``(X, Y) -> (X_gen, Y_gen)`` of Algorithm 1.

    Args:
        num_classes: number of training classes ``C`` (labels are ``0 .. C-1``).
        dim: embedding dimension ``d``.
        transform: ``"sft"`` (Eq. 3-4), ``"sft_d"`` (Sec. 3.4; alias ``"sft-d"``) or ``"translation"`` (Eq. 2).
        scheme: ``"balanced"`` or ``"unbalanced"`` (Sec. 3.5).
        target: target policy ``"batch"`` (default), ``"shared"`` or ``"all"`` (:mod:`dmlkit.augment.schemes`).
        centers: centre mode ``"update"`` (Eq. 9), ``"random"`` or ``"pick"`` (Table 6).
        alpha: step size of the Eq. 9 centre update, in ``(0, 1]``; 1 is Eq. 9 as written.
        tail_threshold: unbalanced scheme: classes with fewer training samples are tail.
        class_counts: ``(C,)`` training-set sample counts; required for ``"unbalanced"``.
        seed: seed of the private ``torch.Generator`` (targets, random/pick centres).
        normalize_input: the embeddings given are pre-normalisation (see ``transform_space``);
            required for ``"sft_d"``.
        update_centers_first: update the centres before generating (swap lines 5-6 of Algorithm 1).
        start_step: number of first steps that only update the centres (no generated batch).
    """

    is_head: Tensor
    is_tail: Tensor

    def __init__(
        self,
        num_classes: int,
        dim: int,
        transform: str = "sft",
        scheme: str = "balanced",
        target: str = "batch",
        centers: str = "update",
        alpha: float = 1.0,
        tail_threshold: int = 15,
        class_counts: Tensor | Sequence[int] | None = None,
        seed: int = 0,
        normalize_input: bool = False,
        update_centers_first: bool = False,
        start_step: int = 0,
    ) -> None:
        super().__init__()
        self.transform = canonical_transform_name(transform)
        # the arguments are checked by the rules of the config section (one place: SFTConfig.__post_init__)
        SFTConfig(
            name=self.transform,
            scheme=scheme,
            target=target,
            centers=centers,
            alpha=alpha,
            tail_threshold=tail_threshold,
            normalize_input=normalize_input,
            update_centers_first=update_centers_first,
            start_step=start_step,
        )
        if int(seed) != seed:
            raise ValueError(f"seed must be an integer, got {seed!r}")
        self.scheme = scheme
        self.target = target
        self.start_step = int(start_step)
        self.steps = 0
        self.tail_threshold = int(tail_threshold)
        self.normalize_input = bool(normalize_input)
        self.update_centers_first = bool(update_centers_first)
        self.rng = torch.Generator().manual_seed(int(seed))
        self.centers = ClassCenters(num_classes, dim, alpha=alpha, mode=centers, generator=self.rng)  # type: ignore[arg-type]
        head, tail = self._head_tail(class_counts)
        self.register_buffer("is_head", head.clone())
        self.register_buffer("is_tail", tail.clone())
        self.last_num_generated = 0
        self.last_center_cosine: Tensor | None = None

    @classmethod
    def from_config(
        cls,
        cfg: SFTConfig,
        num_classes: int,
        dim: int,
        class_counts: Tensor | Sequence[int] | None = None,
        seed: int = 0,
    ) -> "FeatureGenerator":
        """The generator of the ``methods.sft`` section ``cfg`` (``cfg.name`` set): ``num_classes`` classes, ``dim``-d."""
        if not isinstance(cfg, SFTConfig):
            raise ValueError(f"cfg must be an SFTConfig (the methods.sft section), got {type(cfg).__name__}")
        if not cfg.active:
            raise ValueError("methods.sft.name is null (no augmentation): set it to sft, sft_d or translation")
        return cls(
            num_classes,
            dim,
            transform=cfg.name,
            scheme=cfg.scheme,
            target=cfg.target,
            centers=cfg.centers,
            alpha=cfg.alpha,
            tail_threshold=cfg.tail_threshold,
            class_counts=class_counts,
            seed=seed,
            normalize_input=cfg.normalize_input,
            update_centers_first=cfg.update_centers_first,
            start_step=cfg.start_step,
        )

    def _head_tail(self, class_counts: Tensor | Sequence[int] | None) -> tuple[Tensor, Tensor]:
        c = self.centers.num_classes
        if self.scheme != "unbalanced":
            return torch.ones(c, dtype=torch.bool), torch.zeros(c, dtype=torch.bool)
        if class_counts is None:
            raise ValueError(
                "the unbalanced scheme needs class_counts: the number of training samples of each class "
                "(e.g. torch.bincount(train_labels, minlength=num_classes))"
            )
        counts = torch.as_tensor(class_counts)
        if counts.dim() != 1 or counts.numel() != c:
            raise ValueError(f"class_counts must have one entry per class ({c}), got shape {tuple(counts.shape)}")
        return split_head_tail(counts, self.tail_threshold)

    def extra_repr(self) -> str:
        s = f"transform={self.transform!r}, scheme={self.scheme!r}, target={self.target!r}"
        if self.scheme == "unbalanced":
            s += f", tail_threshold={self.tail_threshold}"
        if self.start_step:
            s += f", start_step={self.start_step}"
        return s + f", normalize_input={self.normalize_input}"

    # -- checkpointing of the random stream -------------------------------------------------
    def get_extra_state(self) -> dict[str, Any]:
        return {"generator_state": self.rng.get_state(), "steps": self.steps}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        if isinstance(state, dict) and "generator_state" in state:
            self.rng.set_state(state["generator_state"])
        if isinstance(state, dict):
            self.steps = int(state.get("steps", 0))

    # -- inputs -----------------------------------------------------------------------------
    def check_batch(self, embeddings: Tensor, labels: Tensor) -> None:
        """``ValueError`` unless ``embeddings`` is finite ``(B, d)`` and ``labels`` ``(B,)`` class indices."""
        if not isinstance(embeddings, Tensor) or embeddings.dim() != 2 or embeddings.shape[1] != self.centers.dim:
            shape = tuple(embeddings.shape) if isinstance(embeddings, Tensor) else type(embeddings).__name__
            raise ValueError(f"embeddings must have shape (B, {self.centers.dim}), got {shape}")
        if not torch.isfinite(embeddings).all():
            raise ValueError(
                "embeddings contain NaN or inf: the class centres would be corrupted; check the model, "
                "the learning rate and the loss (e.g. lower the learning rate or enable gradient clipping)"
            )
        if not isinstance(labels, Tensor) or labels.dim() != 1 or labels.shape[0] != embeddings.shape[0]:
            raise ValueError("labels must be a 1-D tensor with one class index per embedding")
        self.centers._check_labels(labels, embeddings.shape[0])  # integer labels in [0, num_classes)

    def transform_space(self, embeddings: Tensor) -> Tensor:
        """The features the centres and the transform see (unnormalised for SFT-d, see the module docstring)."""
        if self.normalize_input and self.transform != "sft_d":
            return F.normalize(embeddings, p=2.0, dim=1)
        return embeddings

    # -- Algorithm 1 ------------------------------------------------------------------------
    def targets(self, labels: Tensor) -> Tensor:
        """Target class of each feature by the scheme and the target policy (``-1``: not transformed), on CPU.

        Only classes with a centre are targets, and features of a class without a centre
        are not transformed.
        """
        avail = self.centers.initialized.detach().cpu()
        y = labels.detach().cpu().long()
        if self.scheme == "balanced":
            t = draw_targets(y, torch.nonzero(avail).flatten(), self.target, self.rng)
        else:
            pool = torch.nonzero(self.is_tail.cpu() & avail).flatten()  # head labels never lie in the tail pool
            t = mask_head(draw_targets(y, pool, self.target, self.rng), self.is_head.cpu()[y])
        return torch.where(avail[y], t, torch.full_like(t, NO_TARGET))

    def generate(self, features: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """``(X_gen, Y_gen)`` from features in the centres' space (line 5 of Algorithm 1).

        Features without a target are dropped; the gradient flows through ``features``.
        """
        t = self.targets(labels).to(labels.device)
        keep = t != NO_TARGET
        x, y_from, y_to = features[keep], labels[keep].long(), t[keep]
        if x.shape[0] == 0:
            return x, y_to
        mu_from = self.centers.get(y_from).to(x.dtype)
        mu_to = self.centers.get(y_to).to(x.dtype)
        return _TRANSFORMS[self.transform](x, mu_from, mu_to), y_to

    @property
    def active(self) -> bool:
        """Whether the next ``step`` generates (the warm-up of ``start_step`` steps is over)."""
        return self.steps >= self.start_step

    def step(self, features: Tensor, labels: Tensor, generate: bool = True) -> tuple[Tensor, Tensor]:
        """Lines 5-6 of Algorithm 1 on features in the centres' space.

        ``generate=False`` (and the first ``start_step`` steps) only update the centres.
        """
        generate = generate and self.active
        self.steps += 1
        self.last_center_cosine = self.centers.batch_cosine(features, labels)  # lag of the centres before this batch
        if self.update_centers_first or not generate:
            self.centers.update(features, labels)
        if not generate:
            self.last_num_generated = 0
            return features[:0], labels[:0].long()
        x_gen, y_gen = self.generate(features, labels)
        if not self.update_centers_first:
            self.centers.update(features, labels)
        self.last_num_generated = int(x_gen.shape[0])
        return x_gen, y_gen
