"""Benchmark: the cost of a whole training step with SFT (and its baselines) relative to the plain loss.

One model (the quickstart embedder: ResNet-20 on 1x32x32 glyph-sized images, 128-d), one batch of
``B = 60`` images (20 classes x 3, the SFT paper's batch) and the multi-similarity loss with its
miner. Each variant runs forward, loss, backward and an Adam step ``repeats`` times, interleaved
round-robin with the others so that machine load hits all alike; the median is reported with its
ratio to the plain step. Variants: ``baseline`` (loss only), ``translation`` (Eq. 2), ``sft``
(Eq. 3-4 with Eq. 9 centres), ``sft_d`` (Sec. 3.4; the model without its L2 layer), each at lam 0.2
with the library's defaults (targets among the batch's classes, the generated term mined by the same
multi-similarity miner, the centre lag and generated-batch statistics computed).

Part of ``dmlkit bench sft`` (its second table; ``--step-repeats 0`` skips it).
"""

from __future__ import annotations

import statistics
from typing import Any

import torch

from benchmarks import _harness as h
from dmlkit.augment.augmented_loss import FeatureAugmentedLoss
from dmlkit.augment.feature_generator import FeatureGenerator
from dmlkit.losses import create_loss, create_miner
from dmlkit.models import ModelConfig, build_embedder

VARIANTS = ("baseline", "translation", "sft", "sft_d")


def _setup(
    variant: str, classes: int, dim: int, seed: int
) -> tuple[torch.nn.Module, torch.nn.Module, torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    normalize = "none" if variant == "sft_d" else "l2"
    model = build_embedder(
        ModelConfig(backbone="resnet20", pooling="gap", embedding_dim=dim, normalize=normalize), in_channels=1
    )
    loss: torch.nn.Module = create_loss("multi_similarity")
    miner = create_miner("multi_similarity")
    if variant != "baseline":
        generator = FeatureGenerator(classes, dim, transform=variant, normalize_input=variant == "sft_d", seed=seed)
        loss = FeatureAugmentedLoss(loss, generator, lam=0.2, miner=miner)
    return model, loss, miner, torch.optim.Adam(list(model.parameters()) + list(loss.parameters()), lr=1e-3)


def step_costs(
    batch_classes: int = 20, per_class: int = 3, dim: int = 128, repeats: int = 10, seed: int = 0
) -> dict[str, Any]:
    """Median seconds per training step of each variant and its ratio to the baseline."""
    g = torch.Generator().manual_seed(seed)
    images = torch.rand(batch_classes * per_class, 1, 32, 32, generator=g)
    labels = torch.arange(batch_classes).repeat_interleave(per_class)
    parts = {v: _setup(v, batch_classes, dim, seed) for v in VARIANTS}

    def step(variant: str) -> None:
        model, loss, miner, opt = parts[variant]
        emb = model(images)
        value = loss(
            emb,
            labels,
            miner(emb.detach() if variant != "sft_d" else torch.nn.functional.normalize(emb.detach(), dim=1), labels),
        )
        opt.zero_grad(set_to_none=True)
        value.backward()
        opt.step()

    times = h.interleaved({v: (lambda v=v: step(v)) for v in VARIANTS}, repeats, warmup=1)
    base = statistics.median(times["baseline"])
    return {
        "batch": batch_classes * per_class,
        "dim": dim,
        "repeats": repeats,
        "threads": torch.get_num_threads(),
        "variants": {
            v: {"median_s": statistics.median(t), "ratio": statistics.median(t) / base} for v, t in times.items()
        },
    }


def format_step_table(r: dict[str, Any]) -> str:
    rows = [[v, f"{m['median_s'] * 1e3:.1f}", f"{m['ratio']:.2f}x"] for v, m in r["variants"].items()]
    return "\n".join(
        [
            f"training step, ResNet-20 1x32x32, batch {r['batch']}, {r['dim']}-d, MS loss + miner, Adam; "
            f"{r['threads']} threads, median of {r['repeats']} (interleaved)",
            h.table(["variant", "ms/step", "vs baseline"], rows),
        ]
    )
