"""Request-size limit for the search server, enforced before any body is parsed.

``BodySizeLimit`` is a pure ASGI middleware: a request whose ``Content-Length`` exceeds the limit is
answered ``413`` at once; a request without one (chunked) is read up to the limit and answered
``413`` when it goes over, otherwise its buffered body is replayed to the application. So an upload
never occupies more than ``max_bytes`` of memory or disk.
"""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["BodySizeLimit"]


class BodySizeLimit:
    """Reject HTTP request bodies larger than ``max_bytes`` with ``413`` and a JSON ``detail``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        self.app, self.max_bytes = app, max_bytes

    async def _reject(self, send: Send) -> None:
        mib = self.max_bytes / 2**20
        body = json.dumps(
            {"detail": f"request body too large: the limit is {mib:.1f} MiB; send a smaller image"}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                declared = self.max_bytes + 1
            if declared > self.max_bytes:
                await self._reject(send)
                return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._reject(send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body, replayed = b"".join(chunks), False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
