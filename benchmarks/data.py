"""Benchmark: images per second of the train loader with the papers' transforms (``dmlkit bench data``).

Data: ``--images`` JPEGs of the benchmarks' typical size (500 x 375 by
default, ``--width`` / ``--height``; quality 90, a CUB photo's size), generated in a temporary folder laid out as
the official CUB-200-2011 archive, so the real ``cub`` loader reads them. The
pictures are smooth colour fields with shapes and mild noise, so that their
file size (about 40-70 KB) and decoding cost are those of photographs, not
of white noise.

Measured in one process, in this order, each over the same images:

1. ``decode`` (the reference): ``PIL.Image.open(path).convert("RGB")`` in the
   main process, nothing else: the floor any JPEG loader pays per image;
2. ``decode+train transform`` in the main process: ``dataset[i]`` with
   ``augment=True`` (resize 256 / random resized crop 227 / flip / normalise,
   thesis Sec. 3.3.2.1);
3. ``DataLoader`` with ``--workers`` persistent worker processes (default 2),
   batches of ``--batch`` (default 32), two epochs: the second epoch's rate is
   the steady state; the first epoch's (worker start-up included) is shown too;
4. the reference users compare with: ``torchvision.datasets.ImageFolder`` over the same files with the same
   transform written with torchvision's transforms, same loader settings, steady state (where torchvision is
   installed: ``.venv-timm/bin/python -m benchmarks.data``).

Ratios are against the reference. On a machine with other load the absolute
numbers move; the ratios of one run are comparable.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import _harness as h

__all__ = ["make_jpegs", "run", "main"]


def _picture(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = rng.uniform(40, 200, 3)
    slope = rng.uniform(-0.3, 0.3, (3, 2))
    img = base[None, None, :] + x[..., None] * slope[:, 0] + y[..., None] * slope[:, 1]
    for _ in range(6):  # a few soft blobs, like objects
        cx, cy, r = rng.uniform(0, width), rng.uniform(0, height), rng.uniform(20, 120)
        mask = np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))
        img += mask[..., None] * rng.uniform(-80, 80, 3)
    img += rng.normal(0, 6, img.shape)  # texture
    return np.clip(img, 0, 255).astype(np.uint8)


def make_jpegs(
    root: Path,
    images: int,
    width: int = 500,
    height: int = 375,
    per_class: int = 16,
    seed: int = 0,
    test_per_class: int = 1,
) -> Path:
    """A CUB-200-2011 layout under ``root`` whose ``train`` split holds ``images`` generated JPEGs (and the
    ``test`` split as many classes of ``test_per_class`` images)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    base = root / "CUB_200_2011"
    train_classes = max(1, -(-images // per_class))
    rows, labels, classes = [], [], []
    pictures = [_picture(rng, width, height) for _ in range(min(images, 32))]  # reuse: generation is not what we time
    image_id = 0
    for c in range(1, 2 * train_classes + 1):
        folder = f"{c:03d}.Class_{c}"
        classes.append(f"{c} {folder}")
        count = min(per_class, images - (c - 1) * per_class) if c <= train_classes else test_per_class
        for k in range(count):
            image_id += 1
            rel = f"{folder}/img_{k:04d}.jpg"
            path = base / "images" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            array = np.roll(pictures[image_id % len(pictures)], image_id * 7, axis=1)
            Image.fromarray(array).save(path, quality=90)
            rows.append(f"{image_id} {rel}")
            labels.append(f"{image_id} {c}")
    (base / "images.txt").write_text("\n".join(rows) + "\n")
    (base / "image_class_labels.txt").write_text("\n".join(labels) + "\n")
    (base / "classes.txt").write_text("\n".join(classes) + "\n")
    return root


def run(
    images: int = 256,
    workers: int = 2,
    batch: int = 32,
    size: int = 227,
    seed: int = 0,
    width: int = 500,
    height: int = 375,
) -> dict[str, Any]:
    """Measure the three rates over ``images`` generated JPEGs (module docstring)."""
    import torch
    from PIL import Image
    from torch.utils.data import DataLoader

    from dmlkit.data import create_dataset

    with tempfile.TemporaryDirectory(prefix="dmlkit-bench-data-") as tmp:
        root = make_jpegs(Path(tmp), images, width=width, height=height, seed=seed)
        ds = create_dataset("cub", "train", root=root, image_size=size, augment=True, seed=seed)
        n = len(ds)
        kb = float(np.mean([os.path.getsize(p) for p in ds.paths])) / 1024
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the main-process measurements use one core, as one worker does
        try:
            t0 = time.perf_counter()
            for p in ds.paths:
                with Image.open(p) as img:
                    img.convert("RGB")
            decode = n / (time.perf_counter() - t0)
            t0 = time.perf_counter()
            for i in range(n):
                ds[i]
            transform = n / (time.perf_counter() - t0)
        finally:
            torch.set_num_threads(threads)
        loader = DataLoader(ds, batch_size=batch, shuffle=False, num_workers=workers, persistent_workers=workers > 0)
        t_start = time.perf_counter()
        first_epoch = sum(x.shape[0] for x, _ in loader)  # includes starting the workers
        t_mid = time.perf_counter()
        second_epoch = sum(x.shape[0] for x, _ in loader)  # workers already running: steady state
        t_end = time.perf_counter()
        del loader
        image_folder = image_folder_rate(root / "CUB_200_2011" / "images", size, batch, workers)
    return {
        "image_folder_per_s": image_folder,
        "images": n,
        "image_size": f"{width}x{height}",
        "mean_kb": kb,
        "crop": size,
        "workers": workers,
        "batch": batch,
        "cpus": os.cpu_count(),
        "decode_per_s": decode,
        "transform_per_s": transform,
        "loader_per_s": second_epoch / (t_end - t_mid),
        "loader_first_epoch_s": t_mid - t_start,
        "loader_first_epoch_per_s": first_epoch / (t_mid - t_start),
    }


def image_folder_rate(folder: Path, size: int, batch: int, workers: int) -> float | None:
    """Steady-state images/s of ``torchvision.datasets.ImageFolder`` over ``folder`` with the same train
    transform (shorter side 256, random resized crop of area 0.16-1 and ratio 3/4-4/3 to ``size``, flip,
    ImageNet normalisation) and the same loader settings; ``None`` where torchvision is not installed."""
    try:
        from torchvision import datasets, transforms
    except Exception:  # not installed, or a build that does not fit this torch
        return None
    from torch.utils.data import DataLoader

    from dmlkit.data.transforms.image_crops import IMAGENET_MEAN, IMAGENET_STD

    transform = transforms.Compose(
        [
            transforms.Resize(256),
            transforms.RandomResizedCrop(size, scale=(0.16, 1.0), ratio=(3 / 4, 4 / 3)),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )
    dataset = datasets.ImageFolder(str(folder), transform=transform)
    loader = DataLoader(dataset, batch_size=batch, shuffle=False, num_workers=workers, persistent_workers=workers > 0)
    sum(x.shape[0] for x, _ in loader)  # first epoch: starts the workers
    started = time.perf_counter()
    seen = sum(x.shape[0] for x, _ in loader)
    return seen / (time.perf_counter() - started)


def format_table(r: dict[str, Any]) -> str:
    ref = r["decode_per_s"]
    first = r["loader_first_epoch_per_s"]
    return "\n".join(
        [
            f"train loader with the papers' transforms: {r['images']} JPEGs {r['image_size']} (mean {r['mean_kb']:.0f} KB), "
            f"crop {r['crop']}, batch {r['batch']}, {r['cpus']} CPUs visible",
            h.table(
                ["", "images/s", "vs decode"],
                [
                    ["decode only, 1 process (reference)", f"{ref:.1f}", f"{1.0:.2f}x"],
                    [
                        "decode + train transform, 1 process",
                        f"{r['transform_per_s']:.1f}",
                        f"{r['transform_per_s'] / ref:.2f}x",
                    ],
                    [
                        f"DataLoader, {r['workers']} workers, steady state",
                        f"{r['loader_per_s']:.1f}",
                        f"{r['loader_per_s'] / ref:.2f}x",
                    ],
                    [f"DataLoader, {r['workers']} workers, first epoch", f"{first:.1f}", f"{first / ref:.2f}x"],
                ],
            )
            + "   (incl. starting the workers)",
            (
                f"torchvision ImageFolder, same transform and loader, steady state: {r['image_folder_per_s']:.1f} images/s; "
                f"dmlkit / ImageFolder = {r['loader_per_s'] / r['image_folder_per_s']:.2f}x"
                if r.get("image_folder_per_s")
                else "torchvision ImageFolder: not measured (torchvision is not installed here)"
            ),
        ]
    )


def _parser() -> argparse.ArgumentParser:
    p = h.parser("data", __doc__)
    p.add_argument("--images", type=int, default=256, help="generated JPEGs in the train split (default 256)")
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    p.add_argument("--batch", type=int, default=32, help="batch size (default 32)")
    p.add_argument("--size", type=int, default=227, help="crop size (default 227)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--width", type=int, default=500, help="JPEG width (default 500)")
    p.add_argument("--height", type=int, default=375, help="JPEG height (default 375)")
    return p


def _run(a: argparse.Namespace) -> dict[str, Any]:
    if a.images < 2 or a.workers < 0 or a.batch < 1:
        raise SystemExit("--images must be >= 2, --workers >= 0 and --batch >= 1")
    return run(
        images=a.images, workers=a.workers, batch=a.batch, size=a.size, seed=a.seed, width=a.width, height=a.height
    )


def main(argv: list[str] | None = None) -> int:
    return h.main(_parser().parse_args(argv), _run, format_table)


if __name__ == "__main__":
    raise SystemExit(main())
