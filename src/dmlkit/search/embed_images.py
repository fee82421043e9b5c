"""Embed a collection of image files with a trained run: batched, with progress, resumable.

``embed_images(run, images, out)`` writes

- ``out`` (e.g. ``embeddings.npy``): float32 ``(N, d)``, row ``i`` = image ``i``;
- ``<stem>.meta.json`` beside it: the run, the checkpoint, and per row the image path and (where the
  folder layout tells it, see ``image_list``) the class label, plus the class names.

Images go through the run's eval transform (``preprocess``) and the run's best model; embeddings
holding NaN or Inf are refused (``ValueError``, nothing of that chunk saved). Work is cut
into chunks of ``chunk_size`` images; each finished chunk is saved atomically to
``<stem>.parts/chunk-NNNNNN.npy``, so an interrupted job started again with the same arguments
skips the chunks already done (and removes the temporary files a killed job left). A manifest in
the parts folder guards against mixing jobs (other images, another checkpoint, another chunk size).
When all chunks are there they are joined into ``out`` and the parts folder is removed; a finished
job run again does nothing.

Unreadable files: by default (``on_corrupt="error"``) every image header is opened before anything is
embedded and all files that are not images are named in one error; a truncated file is found when it
is decoded. ``on_corrupt="skip"`` decodes every image once first, leaves the unreadable ones out (the
rows are the readable images, in order) and lists them with their reasons in ``<stem>.skipped.json``
beside the embeddings (an empty list when none was); the meta's ``skipped`` counts them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from dmlkit.data.datasets.unreadable import check_on_corrupt, listed, readable_indices, unopenable
from dmlkit.extras import require
from dmlkit.io import atomic_write, remove_stale_temporaries, write_json_atomic
from dmlkit.search.image_list import ImageList, list_images
from dmlkit.search.preprocess import ImagePreprocess
from dmlkit.search.run_model import RunModel, load_run_model

__all__ = ["EmbedResult", "embed_images", "load_embeddings", "meta_path_for"]

FORMAT = "dmlkit-embeddings/1"


@dataclass
class EmbedResult:
    """What ``embed_images`` wrote and how much of it was computed now."""

    embeddings: Path
    meta: Path
    count: int
    dim: int
    chunks_computed: int
    chunks_skipped: int
    images_skipped: int = 0  # unreadable images left out (on_corrupt="skip")


class _Files(Dataset):
    def __init__(self, paths: Sequence[Path], preprocess: ImagePreprocess) -> None:
        self.paths, self.preprocess = list(paths), preprocess

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        try:
            return self.preprocess.load(self.paths[index])
        except ValueError as err:
            raise ValueError(
                f"{err}; remove or replace it, or pass --on-corrupt skip (on_corrupt='skip') to leave "
                "unreadable images out"
            ) from err


def meta_path_for(embeddings: str | Path) -> Path:
    """``embeddings.npy`` -> ``embeddings.meta.json``."""
    path = Path(embeddings)
    return path.with_name(f"{path.stem}.meta.json")


def skipped_path_for(embeddings: str | Path) -> Path:
    """``embeddings.npy`` -> ``embeddings.skipped.json`` (``on_corrupt="skip"``: the images left out)."""
    path = Path(embeddings)
    return path.with_name(f"{path.stem}.skipped.json")


def _parts_dir(out: Path) -> Path:
    return out.with_name(f"{out.stem}.parts")


def _fingerprint(images: ImageList, run: RunModel, chunk_size: int, on_corrupt: str) -> str:
    stat = run.checkpoint.stat()
    h = hashlib.sha256()
    h.update(f"{run.checkpoint}|{stat.st_size}|{stat.st_mtime_ns}|{chunk_size}|{on_corrupt}\n".encode())
    for p in images.paths:
        h.update(str(p.resolve()).encode() + b"\n")
    return h.hexdigest()


def _save_npy_atomic(path: Path, array: np.ndarray) -> None:
    with atomic_write(path) as fh:
        np.save(fh, array)


def _open_parts(parts: Path, fingerprint: str, total_chunks: int) -> None:  # chunks before any image is skipped
    manifest = parts / "manifest.json"
    if parts.is_dir() and manifest.is_file():
        found = json.loads(manifest.read_text()).get("fingerprint")
        if found != fingerprint:
            raise ValueError(
                f"'{parts}' holds chunks of another embedding job (other images, checkpoint or chunk size); "
                "delete that folder to start afresh, or choose another --out"
            )
        return
    parts.mkdir(parents=True, exist_ok=True)
    write_json_atomic(manifest, {"fingerprint": fingerprint, "chunks": total_chunks})


def _finished(out: Path, fingerprint: str) -> dict[str, Any] | None:
    meta = meta_path_for(out)
    if out.is_file() and meta.is_file():
        values = json.loads(meta.read_text())
        if values.get("fingerprint") == fingerprint:
            return values
    return None


def embed_images(
    run: str | Path | RunModel,
    images: str | Path | Sequence[str | Path] | ImageList,
    out: str | Path,
    batch_size: int | None = None,
    chunk_size: int = 4096,
    num_workers: int = 0,
    quiet: bool = False,
    on_chunk: Callable[[int, int], None] | None = None,
    on_corrupt: str = "error",
) -> EmbedResult:
    """Embed ``images`` with ``run`` (a run folder, checkpoint or ``RunModel``) into ``out``; see the module docstring.

    ``batch_size`` defaults to the run's ``eval.batch_size``. ``on_chunk(index, total)`` is called after
    each chunk is saved (progress hooks; raising there interrupts the job, which resumes later).
    ``on_corrupt``: ``"error"`` or ``"skip"`` unreadable images (module docstring).
    """
    check_on_corrupt(on_corrupt)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive number of images, got {chunk_size}")
    out = Path(out)
    if out.suffix != ".npy":
        raise ValueError(f"--out must name a .npy file (e.g. embeddings.npy), got '{out}'")
    model = run if isinstance(run, RunModel) else load_run_model(run)
    items = images if isinstance(images, ImageList) else list_images(images)
    batch = int(batch_size or model.config.eval.batch_size)
    if batch < 1:
        raise ValueError(f"batch_size must be positive, got {batch}")
    fingerprint = _fingerprint(items, model, chunk_size, on_corrupt)
    if (done := _finished(out, fingerprint)) is not None:
        chunks = -(-done["count"] // chunk_size)
        return EmbedResult(out, meta_path_for(out), done["count"], done["dim"], 0, chunks, done.get("skipped", 0))
    if on_corrupt == "error" and (bad := unopenable(items.paths)):
        raise ValueError(
            f"{len(bad)} of {len(items)} image(s) cannot be read:\n{listed(bad)}\nremove or replace "
            "them, or pass --on-corrupt skip (on_corrupt='skip') to leave unreadable images out"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    parts = _parts_dir(out)
    _open_parts(parts, fingerprint, -(-len(items) // chunk_size))
    remove_stale_temporaries(parts)  # chunks of a killed job that were being written
    remove_stale_temporaries(out.parent, targets=[out.name, meta_path_for(out).name, skipped_path_for(out).name])
    skipped: list[tuple[str, str]] | None = None
    if on_corrupt == "skip":
        items, skipped = _readable(items, parts)
    total_chunks = -(-len(items) // chunk_size)
    chunk_file = [parts / f"chunk-{i:06d}.npy" for i in range(total_chunks)]
    todo = [i for i in range(total_chunks) if not chunk_file[i].is_file()]
    done_before = total_chunks - len(todo)
    done_images = len(items) - sum(min(chunk_size, len(items) - i * chunk_size) for i in todo)
    with _progress(quiet) as progress:
        task = progress.add_task("embed", total=len(items), completed=done_images)
        for i in todo:
            paths = items.paths[i * chunk_size : (i + 1) * chunk_size]
            loader = DataLoader(_Files(paths, model.preprocess), batch_size=batch, num_workers=num_workers)
            rows = []
            for x in loader:
                rows.append(model.embed(x).numpy())
                progress.advance(task, len(x))
            chunk = np.concatenate(rows).astype(np.float32, copy=False)
            _check_finite(chunk, paths, model)
            _save_npy_atomic(chunk_file[i], chunk)
            if on_chunk is not None:
                on_chunk(i, total_chunks)
    embeddings = np.concatenate([np.load(f) for f in chunk_file])
    _save_npy_atomic(out, embeddings)
    meta = {
        "format": FORMAT,
        "run_dir": str(model.run_dir),
        "checkpoint": str(model.checkpoint),
        "normalize": model.config.model.normalize,
        "count": int(embeddings.shape[0]),
        "dim": int(embeddings.shape[1]),
        "fingerprint": fingerprint,
        "paths": [str(p.resolve()) for p in items.paths],
        "labels": items.labels,
        "class_names": items.class_names,
    }
    if skipped is not None:
        meta["skipped"] = len(skipped)
        write_json_atomic(skipped_path_for(out), [{"path": path, "reason": reason} for path, reason in skipped])
    write_json_atomic(meta_path_for(out), meta)
    shutil.rmtree(parts, ignore_errors=True)
    return EmbedResult(out, meta_path_for(out), meta["count"], meta["dim"], len(todo), done_before, len(skipped or ()))


def _readable(items: ImageList, parts: Path) -> tuple[ImageList, list[tuple[str, str]]]:
    """``items`` without its unreadable images, and ``[(path, reason)]`` of those; decided once per job (kept in
    the parts folder, so a resumed job cuts the same chunks without decoding every image again)."""
    record = parts / "skipped.json"
    if record.is_file():
        skipped = [tuple(entry) for entry in json.loads(record.read_text())]
    else:
        _, skipped = readable_indices(items.paths, "dmlkit embed")
        write_json_atomic(record, skipped)
    left_out = {path for path, _ in skipped}
    keep = [i for i, p in enumerate(items.paths) if str(p) not in left_out]
    labels = None if items.labels is None else [items.labels[i] for i in keep]
    return ImageList([items.paths[i] for i in keep], labels, items.class_names), skipped  # type: ignore[return-value]


def _check_finite(chunk: np.ndarray, paths: Sequence[Path], model: RunModel) -> None:
    """Refuse to save embeddings holding NaN or Inf (no index or search can use them)."""
    bad = ~np.isfinite(chunk).all(axis=1)
    if bad.any():
        raise ValueError(
            f"the model gives NaN or Inf embeddings for {int(bad.sum())} of {len(paths)} images (first: "
            f"'{paths[int(np.argmax(bad))]}'); checkpoint '{model.checkpoint}' has non-finite weights or these "
            "images are not what the run was trained on. Nothing of them was saved"
        )


def _progress(quiet: bool) -> Any:
    require("rich", "search", "dmlkit embed's progress bar")
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True)
    return Progress(
        TextColumn("[bold]embed"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("images"),
        TimeRemainingColumn(),
        console=console,
        disable=quiet or not console.is_terminal,
    )


def load_embeddings(path: str | Path) -> tuple[np.ndarray, dict[str, Any]]:
    """Read an embeddings ``.npy`` and its ``.meta.json`` (a bare ``.npy`` gets a minimal meta without paths)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"embeddings file '{path}' does not exist; write one with dmlkit embed")
    embeddings = np.load(path)
    if embeddings.ndim != 2:
        raise ValueError(f"'{path}' holds an array of shape {embeddings.shape}; embeddings must be (N, d)")
    meta_file = meta_path_for(path)
    meta: dict[str, Any] = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    if meta and meta.get("count") != embeddings.shape[0]:
        raise ValueError(f"'{meta_file}' describes {meta.get('count')} rows but '{path}' has {embeddings.shape[0]}")
    meta.setdefault("count", int(embeddings.shape[0]))
    meta.setdefault("dim", int(embeddings.shape[1]))
    return np.ascontiguousarray(embeddings, dtype=np.float32), meta
