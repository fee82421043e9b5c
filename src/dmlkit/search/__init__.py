"""From a trained run to search: embed image files, index them with faiss, query, export the model.

- ``embed_images(run, images, out)``: a run's best model and eval transform over a folder or list of
  images, batched and resumable (``embed_images``), into ``embeddings.npy`` + ``embeddings.meta.json``;
- ``SearchIndex``: exact / IVF / HNSW faiss index with ``add``, ``search``, ``save``, ``load`` and
  recall@k of approximate modes measured against exact search when built (``index``);
- ``neighbours`` / ``build_index_from_embeddings``: query an index folder by image or embedding (``query``);
- ``export_run``: TorchScript / ONNX export with an eager-parity check (``export``), carrying its
  preprocessing as metadata; ``load_exported_model`` embeds queries with such a file (``exported_model``).

Heavy optional pieces (onnx, the web server in ``dmlkit.serve``) are imported only when used.
"""

from dmlkit.search.embed_images import EmbedResult, embed_images, load_embeddings
from dmlkit.search.export import ExportReport, export_model, export_run
from dmlkit.search.exported_model import ExportedModel, load_exported_model, load_query_model
from dmlkit.search.image_list import ImageList, list_images
from dmlkit.search.index import IndexConfig, SearchIndex, recall_at_k
from dmlkit.search.preprocess import ImagePreprocess, preprocess_for_config
from dmlkit.search.query import Neighbour, build_index_from_embeddings, neighbours
from dmlkit.search.run_model import RunModel, load_run_model

__all__ = [
    "EmbedResult",
    "ExportReport",
    "ExportedModel",
    "ImageList",
    "ImagePreprocess",
    "IndexConfig",
    "Neighbour",
    "RunModel",
    "SearchIndex",
    "build_index_from_embeddings",
    "embed_images",
    "export_model",
    "export_run",
    "list_images",
    "load_embeddings",
    "load_exported_model",
    "load_query_model",
    "load_run_model",
    "neighbours",
    "preprocess_for_config",
    "recall_at_k",
]
