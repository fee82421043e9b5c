"""FastAP's class- and category-based minibatch sampling (Sec. A of the FastAP supplement).

FastAP (Cakir et al., *Deep Metric Learning to Rank*, CVPR 2019) samples
*classes*, not images: in the few-shot setting (a handful of images per class)
"a minibatch will include all images from a class once that class gets
sampled". With minibatch size ``M``, Sec. A compares

- **Random** (``RandomClassBatchSampler``): sample classes from the whole
  training set until ``M`` images are obtained;
- **Hard** (``HardCategoryBatchSampler``): sample two categories; from each,
  sample classes until ``M/2`` images are obtained. One epoch iterates over all
  pairs of distinct categories, ``k`` minibatches per pair:
  ``C(#categories, 2) * k`` minibatches (SOP: 12 categories, k=5 -> 330;
  In-Shop: 23 categories, k=2 -> 506);
- **VehicleID** (``HardCategoryBatchSampler(..., unlabelled="pair")``): only some
  classes have a category (vehicle model). Each minibatch takes ``M/2`` images
  from one labelled category and the other ``M/2`` from randomly sampled
  classes *without* a category label; an epoch has ``sum_c 2 N_c / M``
  minibatches (``N_c`` images in labelled category ``c``).

How this module reads Sec. A where the text leaves a choice open:

- *All images of a sampled class*, in a random order, except the class that
  would overflow the (half-)batch: it contributes a random subset of just the
  images still needed, so every batch has exactly ``M`` (and every half exactly
  ``M/2``) indices. That last class may therefore be partial (possibly a single
  image). ``max_images_per_class`` optionally caps the images a class
  contributes (a random subset), for data with many images per class.
- *Sampling classes*: without replacement within a batch (Random) or within a
  half-batch (Hard), in a running random order: every class of the pool
  (the training set, or one category) is used once before any is used again,
  across batches of the epoch, as ``MPerClassBatchSampler`` does.
- *Categories* are the values of ``class_categories[labels]``; only categories
  that hold images are used (the glyphs train split has 13 of its 18). Classes
  with category ``-1`` (none) are left out of the Hard sampler, or form the
  unlabelled pool with ``unlabelled="pair"``.
- *Small categories* (fewer than ``M/2`` images, after the cap): the paper's
  categories are all large, so it says nothing. ``small_categories="skip"``
  (default) leaves them out of every batch (``skipped_categories`` lists them)
  and raises ``ValueError`` if fewer than two (one with ``unlabelled="pair"``)
  remain; ``"replace"`` keeps them and fills their half by another pass over
  their classes in a new random order, so images repeat in that half.
- *Pair order*: the ``C(K, 2) * k`` (pair, repeat) slots are shuffled with the
  epoch's generator; which category fills the first half is a coin flip.
  ``batches_per_epoch`` other than the default takes that many batches from a
  stream of such shuffled rounds (the first ones if fewer, further rounds if more).
- *VehicleID epoch length*: ``2 N_c / M`` is rarely an integer; each labelled
  category gets ``ceil(2 N_c / M)`` minibatches (at least one, and enough for its
  images to be drawn about once), shuffled; ``N_c`` counts images after the cap.

*Data with many images a class* (CUB: about 30, the font testbed: 87): whole classes fill a batch with one or two
of them, and FastAP ranks almost no negatives. Both samplers warn (``few_classes_warning``) when a batch of the
median class size holds fewer than ``FEW_CLASSES`` classes, and name the cap that fixes it.

All randomness of epoch ``e`` comes from ``make_generator(seed, e)`` (no global
RNG), so the batches are a pure function of ``(seed, epoch)`` and a run resumed
from ``state_dict()`` replays exactly the batches it would have seen.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from dmlkit.data.samplers.class_pool import ClassPool, ClassStream, as_labels
from dmlkit.data.samplers.m_per_class import EpochBatchSampler
from dmlkit.data.samplers.registry import register_batch_sampler
from dmlkit.data.seeding import check_seed, make_generator
from dmlkit.registry import check_kwargs
from dmlkit.validation import check_int

__all__ = ["FEW_CLASSES", "RandomClassBatchSampler", "HardCategoryBatchSampler", "few_classes_warning"]

#: A batch expected to hold fewer classes than this (at the median class size) draws a warning.
FEW_CLASSES = 4


def few_classes_warning(pool: ClassPool, batch_size: int, sampler: str) -> None:
    """Warn (``RuntimeWarning``) when whole classes of the median size fill a batch with fewer than ``FEW_CLASSES``."""
    median = float(torch.as_tensor(pool.usable, dtype=torch.float64).median())
    classes = batch_size / max(median, 1.0)
    if classes < FEW_CLASSES:
        warnings.warn(
            f"{sampler}: a sampled class brings all its images (median {median:.0f} a class), so a batch of {batch_size} "
            f"holds about {classes:.1f} classes and FastAP has few negatives to rank; cap what a class brings with "
            f"train.sampler_params.max_images_per_class (e.g. {max(1, batch_size // 20)} for 20 classes a batch)",
            RuntimeWarning,
            stacklevel=3,
        )


class RandomClassBatchSampler(EpochBatchSampler):
    """FastAP's "Random" minibatches: whole classes sampled from the training set until ``batch_size`` images.

    Sec. A of the FastAP supplement: "Randomly sample classes from the entire
    training set, until M images are obtained", a sampled class bringing all
    its images. Classes are distinct within a batch and visited in a running
    random order (each class once per round, across batches). Each class adds
    all its images (at most ``max_images_per_class``, a random subset) in a
    random order; the class that would overflow the batch adds only the images
    still needed (a random subset), so every batch has exactly ``batch_size``
    indices, grouped by class.

    Args:
        labels: class label of every dataset item.
        batch_size: indices per batch (``M``); at most the number of (capped) images.
        seed: base seed; epoch ``e`` draws from ``make_generator(seed, e)``.
        batches_per_epoch: default ``len(labels) // batch_size`` (at least 1), about one pass over the images.
        max_images_per_class: optional cap on the images a class brings to a batch (default: all).
    """

    def __init__(
        self,
        labels: Sequence[int] | Tensor | np.ndarray,
        batch_size: int,
        seed: int = 0,
        batches_per_epoch: int | None = None,
        max_images_per_class: int | None = None,
    ) -> None:
        lab = as_labels(labels)
        check_int("batch_size", batch_size, 1)
        check_int("batches_per_epoch", batches_per_epoch, 1, none=True)
        check_int("max_images_per_class", max_images_per_class, 1, none=True)
        check_seed(seed)
        self.pool = ClassPool(lab, max_images_per_class)
        few_classes_warning(self.pool, batch_size, "fastap_random")
        total = int(self.pool.usable.sum())
        if batch_size > total:
            raise ValueError(
                f"batch_size={batch_size} exceeds the {total} images the classes can contribute "
                f"(distinct classes per batch); use batch_size <= {total}"
                + (" or raise max_images_per_class" if max_images_per_class is not None else "")
            )
        self.labels = lab
        self.batch_size = batch_size
        self.seed = seed
        self.epoch = 0
        self.max_images_per_class = max_images_per_class
        if batches_per_epoch is None:
            batches_per_epoch = max(1, lab.numel() // batch_size)
        self.batches_per_epoch = batches_per_epoch

    @classmethod
    def from_dataset(cls, dataset: Any, batch_size: int, **kwargs: Any) -> "RandomClassBatchSampler":
        """Build from a ``DMLDataset`` (its ``labels``)."""
        return cls(dataset.labels, batch_size, **kwargs)

    def batches(self, epoch: int) -> list[list[int]]:
        """All batches of ``epoch`` (what ``iter()`` yields after ``set_epoch(epoch)``)."""
        g = make_generator(self.seed, epoch)
        stream = ClassStream(list(range(len(self.pool.members))))
        return [self.pool.fill(stream, g, self.batch_size) for _ in range(self.batches_per_epoch)]


# ---------------------------------------------------------------- Hard: checks, census, slots
def _check_args(
    batch_size: Any,
    seed: Any,
    batches_per_epoch: Any,
    batches_per_pair: Any,
    unlabelled: Any,
    small_categories: Any,
    max_images_per_class: Any,
) -> None:
    """The Hard sampler's settings, each on its own."""
    check_int("batch_size", batch_size, 1)
    if batch_size % 2 or batch_size < 2:
        raise ValueError(
            f"batch_size={batch_size} must be even: half of each batch comes from each of two "
            f"categories (e.g. batch_size={batch_size + 1 if batch_size % 2 else 2})"
        )
    check_int("batches_per_epoch", batches_per_epoch, 1, none=True)
    check_int("batches_per_pair", batches_per_pair, 1, none=True)
    check_int("max_images_per_class", max_images_per_class, 1, none=True)
    check_seed(seed)
    if unlabelled not in ("exclude", "pair"):
        raise ValueError(f"unlabelled must be 'exclude' or 'pair', got {unlabelled!r}")
    if small_categories not in ("skip", "replace"):
        raise ValueError(f"small_categories must be 'skip' or 'replace', got {small_categories!r}")
    if unlabelled == "pair" and batches_per_pair is not None:
        raise ValueError(
            "batches_per_pair does not apply with unlabelled='pair' (each labelled category gets "
            "ceil(2 N_c / batch_size) batches); leave it None or set batches_per_epoch"
        )


def _check_categories(lab: Tensor, cats: Tensor) -> None:
    """Labels index ``cats``, whose values are categories or -1, and some item has a category."""
    if int(lab.min()) < 0 or int(lab.max()) >= cats.numel():
        raise ValueError(
            f"labels must be class ids 0..{cats.numel() - 1} indexing class_categories "
            f"(got labels in [{int(lab.min())}, {int(lab.max())}]); pass one category per class"
        )
    if int(cats.min()) < -1:
        raise ValueError("class_categories must be category ids >= 0, or -1 for a class without category")
    if not bool((cats[lab] >= 0).any()):
        raise ValueError(
            "no class has a category (class_categories is -1 for every sampled class); the Hard "
            "sampler draws each half-batch from a category. Use RandomClassBatchSampler (train.sampler=fastap_random "
            "in a config), or a dataset with category labels"
        )


class _CategoryCensus:
    """Which pool positions (classes) each category holds, and how many (capped) images it can contribute."""

    def __init__(self, pool: ClassPool, cats: Tensor) -> None:
        class_cat = cats[torch.tensor(pool.class_ids)]  # category of each pool position
        self.pool = pool
        self.present = sorted(int(c) for c in torch.unique(class_cat) if int(c) >= 0)  # categories with images
        self.members = {c: torch.nonzero(class_cat == c).flatten().tolist() for c in self.present}
        self.image_counts = {c: self.usable_images(self.members[c]) for c in self.present}
        self.unlabelled: list[int] = torch.nonzero(class_cat < 0).flatten().tolist()  # classes with category -1

    def usable_images(self, positions: list[int]) -> int:
        """Images the classes at ``positions`` can contribute (each capped by ``max_images_per_class``)."""
        return int(self.pool.usable[positions].sum()) if positions else 0


def _choose_categories(
    census: _CategoryCensus, half: int, unlabelled: str, small_categories: str
) -> tuple[list[int], list[int]]:
    """``(categories, skipped)``: those that fill half-batches and, with ``"skip"``, those too small to."""
    counts, present = census.image_counts, census.present
    skipped = [c for c in present if small_categories == "skip" and counts[c] < half]
    categories = [c for c in present if c not in skipped]
    need_labelled = 2 if unlabelled == "exclude" else 1
    if len(categories) < need_labelled:
        hint = (
            f"lower batch_size (largest category has {max(counts.values())} images) or pass small_categories='replace'"
            if skipped
            else "use RandomClassBatchSampler (train.sampler=fastap_random in a config), or unlabelled='pair' "
            "(train.sampler_params.unlabelled=pair) if some classes have no category"
        )
        raise ValueError(
            f"HardCategoryBatchSampler needs {need_labelled} usable categories, found {len(categories)} "
            f"({len(present)} with images, {len(skipped)} skipped for having fewer than "
            f"batch_size/2={half} images); {hint}"
        )
    return categories, skipped


def _check_unlabelled_pool(census: _CategoryCensus, half: int, small_categories: str) -> None:
    """With ``unlabelled="pair"``: classes without a category exist and (unless ``"replace"``) fill a half."""
    if not census.unlabelled:
        raise ValueError(
            "unlabelled='pair' needs classes without a category (-1) to fill the other half; "
            "none has -1, so use unlabelled='exclude'"
        )
    n_unl = census.usable_images(census.unlabelled)
    if n_unl < half and small_categories == "skip":
        raise ValueError(
            f"the classes without a category hold {n_unl} images, fewer than batch_size/2={half}; "
            f"lower batch_size to <= {2 * n_unl} or pass small_categories='replace'"
        )


def _plan_slots(
    categories: list[int], image_counts: dict[int, int], half: int, unlabelled: str, batches_per_pair: int | None
) -> list[tuple[int, int]]:
    """One round's (category, category) batches: every pair ``k`` times, or ``(c, -1)`` ``ceil(2 N_c / M)`` times."""
    if unlabelled == "pair":
        return [(c, -1) for c in categories for _ in range(math.ceil(image_counts[c] / half))]
    k = 1 if batches_per_pair is None else batches_per_pair
    return [(a, b) for i, a in enumerate(categories) for b in categories[i + 1 :] for _ in range(k)]


# ---------------------------------------------------------------- Hard
class HardCategoryBatchSampler(EpochBatchSampler):
    """FastAP's "Hard" minibatches: two categories, ``batch_size / 2`` images of whole classes from each.

    Sec. A of the FastAP supplement. Default (``unlabelled="exclude"``, SOP /
    In-Shop): an epoch visits every pair of distinct categories
    ``batches_per_pair`` times (``C(K, 2) * batches_per_pair`` batches, in a
    seeded shuffled order); a batch's first half holds images of one category
    of its pair and the second half of the other (which goes first is random).
    Within a half, classes of that category are sampled without replacement
    (a running random order per category, each class once per round), each
    bringing all its images (capped by ``max_images_per_class``) except the
    last, which brings only the images still needed. Classes whose category is
    ``-1`` are left out.

    ``unlabelled="pair"`` (PKU VehicleID): one half of each batch comes from a
    labelled category, the other from classes with category ``-1`` (a single
    pool, same running class order). Category ``c`` gets ``ceil(2 N_c /
    batch_size)`` batches per epoch (the paper's ``sum_c 2 N_c / M``, each term
    rounded up), shuffled; ``batches_per_pair`` does not apply.

    Args:
        labels: class label of every item; values index ``class_categories``.
        class_categories: category of every class ``(C,)``, ``-1`` for none.
        batch_size: even number of indices per batch (``M``).
        seed: base seed; epoch ``e`` draws from ``make_generator(seed, e)``.
        batches_per_epoch: default: the epoch structure above; otherwise that many
            batches from a stream of such shuffled rounds.
        batches_per_pair: ``k`` batches per category pair (paper: 5 for SOP, 2 for
            In-Shop); default 1. Must stay ``None`` with ``unlabelled="pair"``.
        unlabelled: ``"exclude"`` or ``"pair"`` (see above).
        small_categories: a category with fewer than ``batch_size / 2`` (capped)
            images is ``"skip"``-ped (default; see ``skipped_categories``) or
            ``"replace"``-d: filled by further passes over its classes, repeating images.
        max_images_per_class: optional cap on the images a class brings to a half (default: all).
    """

    def __init__(
        self,
        labels: Sequence[int] | Tensor | np.ndarray,
        class_categories: Sequence[int] | Tensor | np.ndarray,
        batch_size: int,
        seed: int = 0,
        batches_per_epoch: int | None = None,
        batches_per_pair: int | None = None,
        unlabelled: str = "exclude",
        small_categories: str = "skip",
        max_images_per_class: int | None = None,
    ) -> None:
        lab = as_labels(labels)
        cats = as_labels(class_categories, "class_categories")
        _check_args(
            batch_size, seed, batches_per_epoch, batches_per_pair, unlabelled, small_categories, max_images_per_class
        )
        _check_categories(lab, cats)
        half = batch_size // 2
        self.pool = ClassPool(lab, max_images_per_class)
        few_classes_warning(self.pool, batch_size, "fastap_hard")
        census = _CategoryCensus(self.pool, cats)
        self.image_counts = census.image_counts  # capped images per category
        self.categories, self.skipped_categories = _choose_categories(census, half, unlabelled, small_categories)
        self.unlabelled_classes = census.unlabelled
        if unlabelled == "pair":
            _check_unlabelled_pool(census, half, small_categories)
        self._streams_classes = {c: census.members[c] for c in self.categories}
        self._slots = _plan_slots(self.categories, self.image_counts, half, unlabelled, batches_per_pair)

        self.labels = lab
        self.class_categories = cats
        self.batch_size = batch_size
        self.seed = seed
        self.epoch = 0
        self.batches_per_pair = batches_per_pair
        self.unlabelled = unlabelled
        self.small_categories = small_categories
        self.max_images_per_class = max_images_per_class
        self.batches_per_epoch = batches_per_epoch if batches_per_epoch is not None else len(self._slots)

    @classmethod
    def from_dataset(cls, dataset: Any, batch_size: int, **kwargs: Any) -> "HardCategoryBatchSampler":
        """Build from a ``DMLDataset`` (its ``labels`` and ``class_categories``)."""
        return cls(dataset.labels, dataset.class_categories, batch_size, **kwargs)

    def schedule(self, epoch: int) -> list[tuple[int, int]]:
        """The (first-half, second-half) category of each batch of ``epoch``; ``-1`` is the unlabelled pool."""
        return self._plan(make_generator(self.seed, epoch))

    def _plan(self, g: torch.Generator) -> list[tuple[int, int]]:
        """Shuffled rounds of the slots, cut to ``batches_per_epoch``; drawn first from the epoch's generator."""
        plan: list[tuple[int, int]] = []
        while len(plan) < self.batches_per_epoch:
            perm = torch.randperm(len(self._slots), generator=g).tolist()
            flips = torch.randint(2, (len(self._slots),), generator=g).tolist()
            for i, flip in zip(perm, flips):
                a, b = self._slots[i]
                plan.append((b, a) if flip else (a, b))
        return plan[: self.batches_per_epoch]

    def batches(self, epoch: int) -> list[list[int]]:
        """All batches of ``epoch`` (what ``iter()`` yields after ``set_epoch(epoch)``)."""
        g = make_generator(self.seed, epoch)
        streams = {c: ClassStream(pos) for c, pos in self._streams_classes.items()}
        if self.unlabelled == "pair":
            streams[-1] = ClassStream(self.unlabelled_classes)
        half = self.batch_size // 2
        out: list[list[int]] = []
        for a, b in self._plan(g):
            out.append(self.pool.fill(streams[a], g, half) + self.pool.fill(streams[b], g, half))
        return out


@register_batch_sampler("fastap_random")
def fastap_random(dataset: Any, batch_size: int, seed: int = 0, **params: Any) -> RandomClassBatchSampler:
    check_kwargs(RandomClassBatchSampler, params, "batch sampler 'fastap_random'")
    return RandomClassBatchSampler.from_dataset(dataset, batch_size, seed=seed, **params)


@register_batch_sampler("fastap_hard")
def fastap_hard(dataset: Any, batch_size: int, seed: int = 0, **params: Any) -> HardCategoryBatchSampler:
    check_kwargs(HardCategoryBatchSampler, params, "batch sampler 'fastap_hard'")
    return HardCategoryBatchSampler.from_dataset(dataset, batch_size, seed=seed, **params)
