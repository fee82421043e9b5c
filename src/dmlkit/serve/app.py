"""The search server: a FastAPI application over an index folder and the run that embedded it.

Routes (JSON unless said otherwise):

- ``GET /``: the search page (HTML, ``page.PAGE_HTML``);
- ``GET /api/info``: index size, mode, measured recall, limits;
- ``GET /api/gallery?offset=&limit=``: indexed items, a page at a time;
- ``POST /api/search?k=``: multipart upload, field ``image`` (PNG, JPEG, BMP or WebP, at most
  ``max_upload_bytes``): the image is embedded with the run's model and eval transform and its
  ``k`` nearest items are returned;
- ``GET /api/search/{id}?k=``: the nearest items of indexed item ``id`` (item itself included, at 0);
- ``GET /thumb/{id}``: a PNG thumbnail of an indexed item (only indexed files are ever read).

Answers to bad requests are 4xx with a ``detail`` saying what is wrong: 413 for a body over the limit
(``limits.BodySizeLimit``, checked before parsing), 415 for a type that is not an allowed image,
400 for an empty or undecodable image or a bad ``k``, 404 for an unknown id.
"""

from __future__ import annotations

import io
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from fastapi import FastAPI, File, HTTPException, Query, UploadFile
from fastapi.responses import HTMLResponse, Response
from PIL import Image

from dmlkit.search.index import SearchIndex
from dmlkit.search.preprocess import MAX_IMAGE_PIXELS
from dmlkit.search.query import neighbours, row_description
from dmlkit.search.exported_model import ExportedModel, load_query_model
from dmlkit.search.run_model import RunModel
from dmlkit.serve.limits import BodySizeLimit
from dmlkit.serve.page import PAGE_HTML

__all__ = ["ALLOWED_TYPES", "DEFAULT_MAX_UPLOAD_BYTES", "create_app"]

ALLOWED_TYPES = {"image/png": "PNG", "image/jpeg": "JPEG", "image/bmp": "BMP", "image/webp": "WEBP"}
DEFAULT_MAX_UPLOAD_BYTES = 5 * 2**20
THUMB_SIZE = 96


def _thumbnail(path: str) -> bytes:
    with Image.open(path) as img:
        img = img.convert("RGB")
        if max(img.size) < THUMB_SIZE:  # small images (glyphs): enlarge without blurring
            scale = THUMB_SIZE // max(img.size)
            img = img.resize((img.width * scale, img.height * scale), Image.Resampling.NEAREST)
        else:
            img.thumbnail((THUMB_SIZE, THUMB_SIZE))
        buffer = io.BytesIO()
        img.save(buffer, format="PNG")
        return buffer.getvalue()


def _decode_upload(data: bytes, content_type: str, filename: str, model: RunModel | ExportedModel) -> np.ndarray:
    """Check and decode an uploaded image into a model input batch ``(1, C, H, W)`` as numpy; 4xx on bad input."""
    if not data:
        raise HTTPException(400, "the uploaded file is empty; choose an image file")
    try:
        with Image.open(io.BytesIO(data)) as img:
            kind = img.format
            if img.width * img.height > MAX_IMAGE_PIXELS:
                raise HTTPException(400, f"image has {img.width}x{img.height} pixels, more than {MAX_IMAGE_PIXELS}")
            img.load()
            picture = img.copy()
    except HTTPException:
        raise
    except Exception as err:  # PIL raises many types for corrupt data
        raise HTTPException(
            400,
            f"'{filename}' is not a readable image ({type(err).__name__}: {err}); "
            "upload a valid PNG, JPEG, BMP or WebP file",
        ) from err
    if kind not in ALLOWED_TYPES.values():
        raise HTTPException(415, f"'{filename}' is a {kind} image; upload PNG, JPEG, BMP or WebP")
    declared = ALLOWED_TYPES.get(content_type)
    if declared is not None and declared != kind:
        raise HTTPException(415, f"'{filename}' was sent as {content_type} but holds a {kind} image")
    return model.preprocess.from_pil(picture)[None].numpy()


def create_app(
    index_dir: str | Path,
    run: str | Path | RunModel | ExportedModel | None = None,
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
    k_default: int = 10,
    max_k: int = 100,
) -> Any:
    """The ASGI application serving ``index_dir`` (see the module docstring).

    ``run`` embeds uploads; by default the run recorded in the index (``dmlkit index build`` keeps it).
    It may be a model file of ``dmlkit export``, whose metadata gives the preprocessing of uploads.
    """
    index = SearchIndex.load(index_dir)
    model = _query_model(index, index_dir, run)
    if index.ntotal:
        index.vector(0)  # build lookup structures now, not concurrently in requests
    served = _Served(index, model, index.meta.get("paths"), max_upload_bytes, k_default, max_k)
    app = FastAPI(title="dmlkit search", docs_url="/api/docs", redoc_url=None)
    _add_page_routes(app, served)
    _add_search_routes(app, served)
    _add_thumbnail_route(app, served)
    return BodySizeLimit(app, max_upload_bytes + 64 * 1024)  # room for the multipart envelope


def _query_model(
    index: SearchIndex, index_dir: str | Path, run: str | Path | RunModel | ExportedModel | None
) -> RunModel | ExportedModel:
    """The model that embeds uploads: ``run``, or the run the index records; its dimension must be the index's."""
    run = run if run is not None else index.meta.get("run_dir")
    if run is None:
        raise ValueError(f"index '{index_dir}' does not record the run that embedded it; pass --run RUN_DIR")
    model = run if isinstance(run, (RunModel, ExportedModel)) else load_query_model(run)
    if model.embedding_dim != index.dim:
        raise ValueError(
            f"run '{model.run_dir}' makes {model.embedding_dim}-dimensional embeddings but the index holds {index.dim}; "
            "serve the index with the run that embedded it"
        )
    return model


@dataclass
class _Served:
    """What the routes of one application share: the index, the model embedding uploads, and the limits."""

    index: SearchIndex
    model: RunModel | ExportedModel
    paths: list[str] | None  # the indexed image files, when the index records them
    max_upload_bytes: int
    k_default: int
    max_k: int
    model_lock: threading.Lock = field(default_factory=threading.Lock)  # one upload embedded at a time

    def check_k(self, k: int) -> int:
        if not 1 <= k <= self.max_k:
            raise HTTPException(400, f"k must lie in 1..{self.max_k}, got {k}")
        return k

    def check_id(self, item: int) -> int:
        if not 0 <= item < self.index.ntotal:
            raise HTTPException(404, f"no indexed item {item}; ids run from 0 to {self.index.ntotal - 1}")
        return item

    def described(self, results: list, started: float, query: dict[str, Any]) -> dict[str, Any]:
        """The answer to a search: the query, its neighbours with their thumbnails, the index, the time taken."""
        items = [{**n.to_dict(), "thumbnail": f"/thumb/{n.id}"} for n in results]
        return {
            "query": query,
            "k": len(items),
            "neighbours": items,
            "index": self.index.describe(),
            "elapsed_ms": (time.perf_counter() - started) * 1000,
        }


def _add_page_routes(app: FastAPI, s: _Served) -> None:
    """``/`` (the search page), ``/api/info`` and ``/api/gallery``."""
    index = s.index

    @app.get("/", response_class=HTMLResponse)
    def page() -> str:
        return PAGE_HTML

    @app.get("/api/info")
    def info() -> dict[str, Any]:
        return {
            "count": index.ntotal,
            "dim": index.dim,
            "mode": index.config.mode,
            "description": index.describe(),
            "recall": index.meta.get("recall"),
            "run_dir": str(s.model.run_dir),
            "k_default": s.k_default,
            "max_k": s.max_k,
            "max_upload_bytes": s.max_upload_bytes,
            "allowed_types": sorted(ALLOWED_TYPES),
        }

    @app.get("/api/gallery")
    def gallery(offset: int = Query(0, ge=0), limit: int = Query(48, ge=1, le=200)) -> dict[str, Any]:
        rows = range(offset, min(offset + limit, index.ntotal))
        items = [{"id": r, **row_description(index, r), "thumbnail": f"/thumb/{r}"} for r in rows]
        return {"total": index.ntotal, "offset": offset, "items": items}


def _add_search_routes(app: FastAPI, s: _Served) -> None:
    """``POST /api/search`` (an uploaded image) and ``GET /api/search/{item}`` (an indexed item)."""

    @app.post("/api/search")
    def search_upload(image: UploadFile = File(...), k: int = s.k_default) -> dict[str, Any]:
        started = time.perf_counter()
        s.check_k(k)
        content_type = (image.content_type or "").split(";")[0].strip().lower()
        name = image.filename or "upload"
        if content_type not in ALLOWED_TYPES and content_type != "application/octet-stream":
            raise HTTPException(415, f"'{name}' has type '{content_type or 'unknown'}'; upload PNG, JPEG, BMP or WebP")
        data = image.file.read(s.max_upload_bytes + 1)
        if len(data) > s.max_upload_bytes:
            raise HTTPException(
                413, f"'{name}' is larger than {s.max_upload_bytes / 2**20:.1f} MiB; send a smaller image"
            )
        batch = _decode_upload(data, content_type, name, s.model)
        with s.model_lock:
            query = s.model.embed(torch.from_numpy(batch)).numpy()
        return s.described(neighbours(s.index, query, k), started, {"source": "upload", "filename": name})

    @app.get("/api/search/{item}")
    def search_item(item: int, k: int = s.k_default) -> dict[str, Any]:
        started = time.perf_counter()
        s.check_k(k)
        s.check_id(item)
        query = {"source": "index", "id": item, **row_description(s.index, item)}
        return s.described(neighbours(s.index, s.index.vector(item), k), started, query)


def _add_thumbnail_route(app: FastAPI, s: _Served) -> None:
    """``GET /thumb/{item}``: a PNG thumbnail of an indexed file (cached; no other file is ever read)."""

    @lru_cache(maxsize=4096)
    def thumbnail(item: int) -> bytes:
        return _thumbnail(s.paths[item])  # type: ignore[index]

    @app.get("/thumb/{item}")
    def thumb(item: int) -> Response:
        s.check_id(item)
        if not s.paths:
            raise HTTPException(404, "this index does not record image paths, so it has no thumbnails")
        try:
            data = thumbnail(item)
        except OSError as err:
            raise HTTPException(404, f"image of item {item} cannot be read ({err})") from err
        return Response(data, media_type="image/png", headers={"cache-control": "max-age=3600"})
