"""Guards in front of the routes: the request-size limit and the one JSON shape every error takes.

Errors are `{"error": one sentence, "field": the field at fault or absent}` so the page (or a person with
curl) can tell what to fix; a 503 carries Retry-After, so a client knows when to ask again.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def error(status: int, message: str, field: str | None = None, retry_after: int | None = None) -> JSONResponse:
    """A JSON error response: {"error": message, "field": field (when one field is at fault)}."""
    body: dict[str, Any] = {"error": message}
    if field:
        body["field"] = field
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return JSONResponse(body, status_code=status, headers=headers)


class BodyLimit:
    """Answer 413 to a request body over `max_bytes`, before any of it is parsed.

    A declared Content-Length over the limit is refused at once; a body without one (chunked) is counted
    as it arrives and refused as soon as it passes the limit, so a large body never sits in memory."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._refuse(send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # raised while the route reads its body: the app's HTTPException handler answers 413
                    raise HTTPException(413, f"the request body is larger than {self.max_bytes} bytes")
            return message

        await self.app(scope, counted, send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps({"error": f"the request body is larger than {self.max_bytes} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
