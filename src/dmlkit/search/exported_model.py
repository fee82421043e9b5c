"""An exported model file (``dmlkit export``) as a query embedder: its preprocessing read from its own metadata.

``load_exported_model(path)`` opens an ONNX file (with onnxruntime) or a TorchScript file written by
``dmlkit.search.export.export_run`` and reads the ``dmlkit`` metadata stored in it: channels, size,
mean and std of the input, the embedding size, the run it came from. The result offers what
``dmlkit search`` and ``dmlkit serve`` use of a run (``preprocess``, ``embed``, ``embedding_dim``,
``run_dir``), so an application can search with the exported file alone, the training run gone.
``load_query_model`` takes either such a file or a run folder (or a checkpoint inside one).
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from dmlkit.search.preprocess import ImagePreprocess

__all__ = ["ExportedModel", "is_exported_model", "load_exported_model", "load_query_model"]

METADATA_KEY = "dmlkit"  # as dmlkit.search.export
EXTRA_FILE = f"{METADATA_KEY}.json"


@dataclass
class ExportedModel:
    """An exported embedding model and the preprocessing its metadata records."""

    path: Path
    format: str
    preprocess: ImagePreprocess
    embedding_dim: int
    metadata: dict[str, Any]
    _run: Callable[[np.ndarray], np.ndarray]

    @property
    def run_dir(self) -> Path:
        """The exported file itself (what serves the embeddings); the source run is ``metadata["run_dir"]``."""
        return self.path

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """Embeddings ``(B, d)`` (float32, CPU) of a batch of preprocessed images ``(B, C, H, W)``."""
        return torch.from_numpy(np.asarray(self._run(images.numpy().astype(np.float32)), dtype=np.float32))


def is_exported_model(path: str | Path) -> bool:
    """An ONNX file, or a TorchScript archive carrying dmlkit's metadata (a checkpoint ``.pt`` is neither)."""
    path = Path(path)
    if not path.is_file():
        return False
    if path.suffix.lower() == ".onnx":
        return True
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return any(name.endswith(f"/extra/{EXTRA_FILE}") for name in archive.namelist())


def _parse(text: str | bytes | None, path: Path) -> dict[str, Any]:
    if not text:
        raise ValueError(
            f"'{path}' carries no dmlkit metadata (channels, size, mean, std of its input); export it again with "
            "dmlkit export, or pass the run folder it came from"
        )
    values = json.loads(text)
    p = values["preprocess"]
    values["preprocess"] = ImagePreprocess(
        int(p["channels"]),
        int(p["size"]),
        tuple(p["mean"]),
        tuple(p["std"]),
        resize=p.get("resize"),
        draft=bool(p.get("draft", False)),
        interpolate=bool(p.get("interpolate", False)),
    )  # files exported before the crop and interpolate modes lack those keys: a square resize
    return values


def _open_onnx(path: Path) -> tuple[dict[str, Any], Callable[[np.ndarray], np.ndarray]]:
    try:
        import onnxruntime as ort
    except ImportError as err:
        raise ValueError("an ONNX model needs onnxruntime: pip install 'dmlkit[export]'") from err
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    metadata = _parse(session.get_modelmeta().custom_metadata_map.get(METADATA_KEY), path)
    return metadata, lambda x: session.run(["embeddings"], {"images": x})[0]


def _open_torchscript(path: Path) -> tuple[dict[str, Any], Callable[[np.ndarray], np.ndarray]]:
    extra = {EXTRA_FILE: ""}
    module = torch.jit.load(str(path), map_location="cpu", _extra_files=extra)
    metadata = _parse(extra[EXTRA_FILE], path)

    def run(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return module(torch.from_numpy(x)).float().numpy()

    return metadata, run


def load_exported_model(path: str | Path) -> ExportedModel:
    """The exported model at ``path`` with the preprocessing its metadata records (see the module docstring)."""
    path = Path(path)
    if not is_exported_model(path):
        raise ValueError(f"'{path}' is not a model file written by dmlkit export (.onnx, or TorchScript .pt)")
    fmt = "onnx" if path.suffix.lower() == ".onnx" else "torchscript"
    metadata, run = _open_onnx(path) if fmt == "onnx" else _open_torchscript(path)
    return ExportedModel(path.resolve(), fmt, metadata["preprocess"], int(metadata["embedding_dim"]), metadata, run)


def load_query_model(source: str | Path) -> Any:
    """What embeds query images: an exported model file, else the run folder (or checkpoint) ``source``."""
    if is_exported_model(source):
        return load_exported_model(source)
    from dmlkit.search.run_model import load_run_model

    return load_run_model(source)
