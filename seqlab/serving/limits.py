"""Guards in front of the routes: the request-size limit, a per-caller rate, and the one JSON shape every
error takes.

Errors are `{"error": one sentence, "field": the field at fault or absent}` so the page (or a person with
curl) can tell what to fix; a 503 carries Retry-After, so a client knows when to ask again.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
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


class RateLimit:
    """At most `burst` calls per key at once, then one more every `every_s` seconds (a token bucket per key).

    The keys are the callers (the person, each paired extension), a bounded set, so the buckets are too."""

    def __init__(self, burst: int, every_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.burst, self.every_s, self.clock = burst, every_s, clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, when counted)

    def take(self, key: str) -> int:
        """Use one call of `key`'s: 0 when allowed, else the whole seconds until the next one is."""
        now = self.clock()
        tokens, then = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - then) / self.every_s)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            return max(1, math.ceil((1.0 - tokens) * self.every_s))
        self._buckets[key] = (tokens - 1.0, now)
        return 0


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
        await send_error(send, 413, f"the request body is larger than {self.max_bytes} bytes")


async def send_error(send: Send, status: int, message: str, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    """The JSON error of `error`, sent straight through ASGI by a middleware that answers before any route
    (`headers` added: the gate's security and CORS headers)."""
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), *headers,
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
