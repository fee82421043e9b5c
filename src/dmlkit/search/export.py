"""Export a run's embedding model for applications: TorchScript or ONNX, checked against eager.

``export_model(model, example, fmt, out)`` works on any eval-mode ``nn.Module`` mapping images
``(B, C, H, W)`` to embeddings ``(B, d)``:

- ``torchscript``: ``torch.jit.trace`` with ``example`` (the forward pass of the dmlkit embedders has
  no data-dependent control flow; GSP runs its fixed number of iterations of Proposition 5.2.1, which
  the trace unrolls), saved with ``torch.jit.save``; load it with ``torch.jit.load`` (no dmlkit needed).
- ``onnx``: ``torch.onnx.export`` (the ``torch.export``-based exporter, opset 18) with a dynamic batch
  dimension; needs the ``export`` extra (``onnx``, ``onnxscript``; ``onnxruntime`` for the check).

After writing, the exported model is run on ``parity_inputs`` (the example and a batch of another
size) and compared with the eager model: ``ExportReport.max_abs_diff`` must not exceed ``tolerance``
(1e-5 by default) or ``export_model`` raises ``ValueError``. A NaN or Inf in either output is a
failure too (a difference that is not a number is not within any tolerance), so a model with
non-finite weights is never exported. The input and output names in ONNX are ``images`` and
``embeddings``.

``export_run`` also stores what an application needs to feed the model, as JSON under the key
``dmlkit`` (ONNX ``metadata_props``; the TorchScript extra file ``dmlkit.json``): the preprocessing
(channels, square size, per-channel mean and std, as ``ImagePreprocess``), the embedding size and
the run and checkpoint it came from. ``dmlkit search --run`` and ``dmlkit serve --run`` accept
such a file in place of a run folder (``dmlkit.search.exported_model``).
"""

from __future__ import annotations

import json
import logging
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from torch import nn

from dmlkit.search.exported_model import EXTRA_FILE, METADATA_KEY
from dmlkit.search.run_model import RunModel, load_run_model

__all__ = ["EXPORT_FORMATS", "EXPORT_METADATA_FORMAT", "ExportReport", "export_model", "export_run", "run_exported"]

EXPORT_FORMATS = ("torchscript", "onnx")
ONNX_OPSET = 18
EXPORT_METADATA_FORMAT = "dmlkit-export/1"


@dataclass
class ExportReport:
    """Where the model went and how closely it matches the eager model."""

    path: Path
    format: str
    max_abs_diff: float
    checked_batches: tuple[int, ...]


def _import_onnx() -> None:
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as err:
        raise ValueError(
            "ONNX export needs the packages onnx and onnxscript (and onnxruntime to check the result): "
            "pip install 'dmlkit[export]', or use --format torchscript"
        ) from err


def run_exported(path: str | Path, fmt: str, images: torch.Tensor) -> torch.Tensor:
    """Embeddings of ``images`` computed by an exported model file (TorchScript or ONNX via onnxruntime)."""
    if fmt == "torchscript":
        module = torch.jit.load(str(path), map_location="cpu")
        with torch.no_grad():
            return module(images).float()
    if fmt == "onnx":
        try:
            import onnxruntime as ort
        except ImportError as err:
            raise ValueError("running an ONNX model needs onnxruntime: pip install 'dmlkit[export]'") from err
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        (out,) = session.run(["embeddings"], {"images": images.numpy().astype(np.float32)})
        return torch.from_numpy(out)
    raise ValueError(f"unknown export format '{fmt}'; valid formats are: {', '.join(EXPORT_FORMATS)}")


def _write(
    model: nn.Module, example: torch.Tensor, fmt: str, out: Path, metadata: dict[str, Any] | None = None
) -> None:
    text = json.dumps(metadata) if metadata is not None else None
    if fmt == "torchscript":
        with torch.no_grad(), warnings.catch_warnings():  # GSP traces as plain ops (gsp_transport)
            warnings.simplefilter("ignore", torch.jit.TracerWarning)  # shape checks become constants: fine
            traced = torch.jit.trace(model, example, check_trace=False)
        torch.jit.save(traced, str(out), _extra_files={EXTRA_FILE: text} if text is not None else None)
        return
    _import_onnx()
    batch = torch.export.Dim("batch", min=1, max=1 << 16)
    with torch.no_grad(), _known_exporter_noise_silenced():
        program = torch.onnx.export(
            model,
            (example,),
            input_names=["images"],
            output_names=["embeddings"],
            opset_version=ONNX_OPSET,
            dynamic_shapes=({0: batch},),
            dynamo=True,
            verbose=False,
        )
    program.save(str(out))
    if text is not None:
        import onnx

        proto = onnx.load(str(out))
        entry = proto.metadata_props.add()
        entry.key, entry.value = METADATA_KEY, text
        onnx.save(proto, str(out))


#: What torch's ONNX exporter says on every export that concerns no dmlkit model: the logger that reports
#: torchvision's operators as skipped (dmlkit exports none of them), and a deprecation inside torch itself.
EXPORTER_REGISTRATION_LOGGER = "torch.onnx._internal.exporter._registration"
EXPORTER_FUTURE_WARNINGS = (r"`isinstance\(treespec, LeafSpec\)` is deprecated",)


@contextmanager
def _known_exporter_noise_silenced() -> Iterator[None]:
    """Silence only the known messages above; every other warning of the exporter still shows."""
    logger = logging.getLogger(EXPORTER_REGISTRATION_LOGGER)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            for message in EXPORTER_FUTURE_WARNINGS:
                warnings.filterwarnings("ignore", message=message, category=FutureWarning)
            yield
    finally:
        logger.setLevel(level)


def _check_finite(embeddings: torch.Tensor, what: str) -> None:
    bad = int((~torch.isfinite(embeddings)).sum())
    if bad:
        raise ValueError(
            f"{what} gives {bad} NaN or Inf values among {embeddings.numel()} on the parity batches; "
            "its weights are not finite (a run that diverged): export a checkpoint written before that"
        )


def export_model(
    model: nn.Module,
    example: torch.Tensor,
    fmt: str,
    out: str | Path,
    tolerance: float = 1e-5,
    parity_inputs: list[torch.Tensor] | None = None,
    metadata: dict[str, Any] | None = None,
) -> ExportReport:
    """Export ``model`` (put in eval mode) to ``out`` in format ``fmt`` and check it; see the module docstring.

    ``metadata`` (JSON-serialisable) is stored in the file under the key ``dmlkit``.
    """
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format '{fmt}'; valid formats are: {', '.join(EXPORT_FORMATS)}")
    if example.ndim != 4 or example.shape[0] < 2:
        raise ValueError(f"example must be an image batch (B >= 2, C, H, W), got shape {tuple(example.shape)}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    model.eval()
    _write(model, example, fmt, out, metadata)
    checks = parity_inputs or [example, torch.cat([example, example.flip(0), example[:1]])]
    worst = 0.0
    for x in checks:
        with torch.no_grad():
            eager = model(x).float()
        exported = run_exported(out, fmt, x)
        if exported.shape != eager.shape:
            raise ValueError(f"exported model returned shape {tuple(exported.shape)}, eager {tuple(eager.shape)}")
        _check_finite(eager, "the eager model")
        _check_finite(exported, f"the exported {fmt} model")
        worst = max(worst, float((exported - eager).abs().max()))
    if not worst <= tolerance:
        raise ValueError(
            f"exported {fmt} model differs from the eager model by {worst:.3g} > {tolerance:g}; "
            "the model has an operation the exporter does not reproduce faithfully"
        )
    return ExportReport(out, fmt, worst, tuple(int(x.shape[0]) for x in checks))


def export_run(run: str | Path | RunModel, fmt: str, out: str | Path, tolerance: float = 1e-5) -> ExportReport:
    """Export the best model of a run folder; its input is what ``RunModel.preprocess`` makes of an image file,
    which the file records (see the module docstring)."""
    model = run if isinstance(run, RunModel) else load_run_model(run)
    return export_model(model.model, model.example_input(batch=2), fmt, out, tolerance, metadata=export_metadata(model))


def export_metadata(model: RunModel) -> dict[str, Any]:
    """What an exported file records about its input and origin (the ``dmlkit`` metadata)."""
    p = model.preprocess
    return {
        "format": EXPORT_METADATA_FORMAT,
        "preprocess": {**asdict(p), "mean": list(p.mean), "std": list(p.std)},
        "embedding_dim": model.embedding_dim,
        "run_dir": str(model.run_dir),
        "checkpoint": str(model.checkpoint),
    }
