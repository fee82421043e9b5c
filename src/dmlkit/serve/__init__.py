"""A small local search server over an index folder: a page to upload or pick an image and see its
nearest neighbours, and a JSON API for programs (``create_app``; ``serve`` runs it with uvicorn).

Needs the ``serve`` extra (FastAPI, uvicorn, python-multipart); imported only by ``dmlkit serve``.
"""

from dmlkit.serve.app import ALLOWED_TYPES, DEFAULT_MAX_UPLOAD_BYTES, create_app
from dmlkit.serve.server import serve

__all__ = ["ALLOWED_TYPES", "DEFAULT_MAX_UPLOAD_BYTES", "create_app", "serve"]
