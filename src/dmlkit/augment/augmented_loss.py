"""A loss wrapper that adds the loss on feature-transformed embeddings: Eq. 10 of the SFT paper.

``FeatureAugmentedLoss(loss)`` computes

    J(X, Y) + lam * J(X_gen, Y_gen)                                   (Eq. 10)

where ``J`` is any loss with PML's signature (pair/tuple losses such as
``MultiSimilarityLoss``, proxy/classification losses with trainable parameters such as
``ProxyAnchorLoss``) and ``(X_gen, Y_gen)`` is produced from the batch by Algorithm 1:

1. (line 5) for each feature ``x_i`` the scheme of Sec. 3.5 picks a target class ``t_i``
   (:mod:`dmlkit.augment.schemes`: ``"balanced"`` -- a random other class;
   ``"unbalanced"`` -- head features to a random tail class, tail features untouched);
   ``x_gen,i = T(x_i, mu_{y_i}, mu_{t_i})`` with ``T`` the spherical transform (SFT,
   Eq. 3-4), its degenerate form (SFT-d, Sec. 3.4) or the translation (Eq. 2), and
   ``y_gen,i = t_i``. The centres are constants (buffers); the gradient flows through
   ``x_i`` only.
2. (line 6) the class centres are updated with the batch, Eq. 9 (detached, see
   :class:`~dmlkit.augment.centers.ClassCenters`). As in Algorithm 1 the step uses the
   centres *before* this batch's update; ``update_centers_first=True`` swaps lines 5 and 6
   (the batch's own classes then have a centre already in the first step).

Decisions where the paper is silent (documented choices):

* **Pair losses see the generated batch alone.** Eq. 10 writes a separate
  ``J(theta; X_gen, Y_gen)``, so the generated features are scored among themselves, not
  together with the originals (pairs real-vs-generated are not formed). ``indices_tuple``
  (mined on the real batch) is used only for the real term; the generated term is
  unmined. ``ref_emb``/``ref_labels`` (e.g. a cross-batch memory) are passed to both terms.
* **Proxy/classification losses** are simply called on ``(X_gen, Y_gen)``; their proxies
  receive gradient from both terms.
* **Classes without a centre** (the first batches of ``"update"``/``"pick"`` modes) are
  never targets, and a feature whose own class has no centre yet is not transformed (its
  ``mu_{y_i}`` is unknown). Features without a target (``-1``) are dropped from the
  generated batch; when nothing is generated the generated term is zero (with a graph, so
  ``backward`` works). ``last_num_generated`` holds the size of the last generated batch.
* **SFT-d works before normalisation** (Proposition 2: "we use Eq. 2 before feature
  normalization and then reproject them back to the hypersphere"). To use it, feed the
  *unnormalised* embeddings (the head's output before its L2 normalisation) and set
  ``normalize_input=True``: the module L2-normalises them for ``J(X, Y)``, keeps the centres
  in the unnormalised space, and generates ``normalize(x + mu_t - mu_y)``. Evaluate the
  model on normalised embeddings as usual. With ``normalize_input=False`` SFT-d translates
  whatever it is given and re-normalises.
* ``normalize_input=True`` with ``"sft"``/``"translation"``: features are normalised first
  and the centres/transforms live on the sphere (the translation result is not
  re-normalised: that is Eq. 2 as used by FTL).
* With ``lam == 0`` the wrapped loss is called once (the value is exactly ``J(X, Y)``); the
  centres are still updated, so switching ``lam`` on later starts from warm centres.

State: the centres are buffers of the ``centers`` submodule (``centers.centers``,
``centers.initialized``), the head/tail split buffers ``is_head``/``is_tail``, and the RNG
state of the private generator is stored as the module's extra state, so a
``state_dict`` round trip resumes the same random stream.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dmlkit.augment.centers import CENTER_MODES, ClassCenters
from dmlkit.augment.schemes import NO_TARGET, SCHEMES, balanced_targets, split_head_tail
from dmlkit.augment.sft import degenerate_transform, spherical_transform, translation_transform

__all__ = ["FeatureAugmentedLoss", "AUGMENT_TRANSFORMS", "canonical_transform_name"]

AUGMENT_TRANSFORMS = ("sft", "sft_d", "translation")
_ALIASES = {"sft": "sft", "sft_d": "sft_d", "sft-d": "sft_d", "translation": "translation"}


def canonical_transform_name(name: str) -> str:
    """``"sft"``, ``"sft_d"`` (alias ``"sft-d"``) or ``"translation"``; ``ValueError`` otherwise."""
    try:
        return _ALIASES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown transform {name!r}: choose one of {AUGMENT_TRANSFORMS}") from None


class FeatureAugmentedLoss(nn.Module):
    """``J(X, Y) + lam * J(X_gen, Y_gen)`` (Eq. 10 of the SFT paper), following Algorithm 1.

    Args:
        loss: the wrapped loss ``J`` with PML's signature
            ``(embeddings, labels, indices_tuple=None, ref_emb=None, ref_labels=None)``.
        num_classes: number of training classes ``C`` (labels are ``0 .. C-1``).
        dim: embedding dimension ``d``.
        transform: ``"sft"`` (Eq. 3-4), ``"sft_d"`` (Sec. 3.4; alias ``"sft-d"``) or
            ``"translation"`` (Eq. 2).
        lam: weight ``lambda`` of the generated term, ``>= 0`` (paper: 0.2).
        scheme: ``"balanced"`` or ``"unbalanced"`` (Sec. 3.5).
        centers: centre mode ``"update"`` (Eq. 9), ``"random"`` or ``"pick"`` (Table 6).
        alpha: step size of the Eq. 9 centre update, in ``(0, 1]``.
        tail_threshold: unbalanced scheme: classes with fewer training samples are tail.
        class_counts: ``(C,)`` training-set sample counts; required for ``"unbalanced"``.
        seed: seed of the private ``torch.Generator`` (targets, random/pick centres).
        normalize_input: the input embeddings are *pre-normalisation*; L2-normalise them
            here (required to use SFT-d as in the paper, see the module docstring).
        update_centers_first: update the centres before generating (swap lines 5-6 of
            Algorithm 1).
    """

    is_head: Tensor
    is_tail: Tensor

    def __init__(
        self,
        loss: nn.Module,
        num_classes: int,
        dim: int,
        transform: str = "sft",
        lam: float = 0.2,
        scheme: str = "balanced",
        centers: str = "update",
        alpha: float = 0.5,
        tail_threshold: int = 15,
        class_counts: Tensor | Sequence[int] | None = None,
        seed: int = 0,
        normalize_input: bool = False,
        update_centers_first: bool = False,
    ) -> None:
        super().__init__()
        if not callable(loss):
            raise ValueError("loss must be a callable loss module with PML's signature (embeddings, labels, ...)")
        self.transform = canonical_transform_name(transform)
        if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not math.isfinite(lam) or lam < 0:
            raise ValueError(f"lam must be a finite number >= 0 (the paper uses 0.2), got {lam!r}")
        if scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {scheme!r}: choose one of {SCHEMES}")
        if centers not in CENTER_MODES:
            raise ValueError(f"unknown centers mode {centers!r}: choose one of {CENTER_MODES}")
        if int(seed) != seed:
            raise ValueError(f"seed must be an integer, got {seed!r}")
        self.loss = loss
        self.lam = float(lam)
        self.scheme = scheme
        self.tail_threshold = int(tail_threshold)
        self.normalize_input = bool(normalize_input)
        self.update_centers_first = bool(update_centers_first)
        self.generator = torch.Generator().manual_seed(int(seed))
        self.centers = ClassCenters(num_classes, dim, alpha=alpha, mode=centers, generator=self.generator)  # type: ignore[arg-type]
        c = self.centers.num_classes
        if scheme == "unbalanced":
            if class_counts is None:
                raise ValueError(
                    "the unbalanced scheme needs class_counts: the number of training samples of each class "
                    "(e.g. torch.bincount(train_labels, minlength=num_classes))"
                )
            counts = torch.as_tensor(class_counts)
            if counts.dim() != 1 or counts.numel() != c:
                raise ValueError(f"class_counts must have one entry per class ({c}), got shape {tuple(counts.shape)}")
            head, tail = split_head_tail(counts, tail_threshold)
        else:
            head = torch.ones(c, dtype=torch.bool)
            tail = torch.zeros(c, dtype=torch.bool)
        self.register_buffer("is_head", head.clone())
        self.register_buffer("is_tail", tail.clone())
        self.last_num_generated = 0

    def extra_repr(self) -> str:
        s = f"transform={self.transform!r}, lam={self.lam}, scheme={self.scheme!r}"
        if self.scheme == "unbalanced":
            s += f", tail_threshold={self.tail_threshold}"
        return s + f", normalize_input={self.normalize_input}"

    # -- checkpointing of the random stream -------------------------------------------------
    def get_extra_state(self) -> dict[str, Any]:
        return {"generator_state": self.generator.get_state()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        if isinstance(state, dict) and "generator_state" in state:
            self.generator.set_state(state["generator_state"])

    # -- Algorithm 1 ------------------------------------------------------------------------
    def targets(self, labels: Tensor) -> Tensor:
        """Target class of each feature by the scheme (``-1``: not transformed), on CPU.

        Only classes with a centre are targets, and features of a class without a centre
        are not transformed.
        """
        avail = self.centers.initialized.detach().cpu()
        y = labels.detach().cpu().long()
        if self.scheme == "balanced":
            t = balanced_targets(y, avail, self.generator)
        else:
            pool = torch.nonzero(self.is_tail.cpu() & avail).flatten()
            t = balanced_targets(y, pool, self.generator)  # head labels never lie in the tail pool
            t = torch.where(self.is_head.cpu()[y], t, torch.full_like(t, NO_TARGET))
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
        if self.transform == "sft":
            x_gen = spherical_transform(x, mu_from, mu_to)
        elif self.transform == "sft_d":
            x_gen = degenerate_transform(x, mu_from, mu_to)
        else:
            x_gen = translation_transform(x, mu_from, mu_to)
        return x_gen, y_to

    def forward(
        self,
        embeddings: Tensor,
        labels: Tensor,
        indices_tuple: Any = None,
        ref_emb: Tensor | None = None,
        ref_labels: Tensor | None = None,
    ) -> Tensor:
        """Eq. 10: ``J(X, Y) + lam * J(X_gen, Y_gen)``; updates the class centres (Eq. 9)."""
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
        if self.normalize_input:
            x = F.normalize(embeddings, p=2.0, dim=1)
            if ref_emb is not None:
                ref_emb = F.normalize(ref_emb, p=2.0, dim=1)
        else:
            x = embeddings
        # Space of the centres and the transform: unnormalised for SFT-d, the loss's input otherwise.
        feats = embeddings if self.transform == "sft_d" else x
        real = self.loss(x, labels, indices_tuple, ref_emb, ref_labels)
        if self.update_centers_first:
            self.centers.update(feats, labels)
        if self.lam == 0.0:
            self.last_num_generated = 0
            if not self.update_centers_first:
                self.centers.update(feats, labels)
            return real
        x_gen, y_gen = self.generate(feats, labels)
        if not self.update_centers_first:
            self.centers.update(feats, labels)
        self.last_num_generated = int(x_gen.shape[0])
        if x_gen.shape[0] == 0:
            return real + 0.0 * embeddings.sum()
        gen = self.loss(x_gen, y_gen, None, ref_emb, ref_labels)
        return real + self.lam * gen
