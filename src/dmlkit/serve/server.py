"""Run the search application with uvicorn; loopback only unless the user names another address."""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path

DEFAULT_MAX_UPLOAD_BYTES = 5 * 2**20  # as dmlkit.serve.app, which needs FastAPI to import

__all__ = ["is_loopback", "serve"]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and addresses in 127.0.0.0/8 or ``::1``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(
    index_dir: str | Path,
    run: str | Path | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
) -> None:
    """Serve ``index_dir`` at ``http://host:port/`` until interrupted (Ctrl-C)."""
    try:
        import uvicorn

        from dmlkit.serve.app import create_app
    except ImportError as err:
        raise ValueError(
            f"dmlkit serve needs FastAPI, uvicorn and python-multipart ({err}): pip install 'dmlkit[serve]'"
        ) from err
    if not 0 < port < 65536:
        raise ValueError(f"--port must lie in 1..65535, got {port}")
    app = create_app(index_dir, run, max_upload_bytes=max_upload_bytes)
    if not is_loopback(host):
        print(
            f"warning: serving on {host}: other machines can reach this server (it has no authentication)",
            file=sys.stderr,
        )
    print(f"dmlkit serve: http://{'[' + host + ']' if ':' in host else host}:{port}/  (Ctrl-C stops)", file=sys.stderr)
    uvicorn.run(app, host=host, port=port, log_level="warning")
