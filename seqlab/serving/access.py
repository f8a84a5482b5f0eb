"""The gate in front of every route: a request proves it comes from the person before anything runs.

A model trained on a mailbox is that mailbox in lossy form, and any web page the person visits can send
requests to 127.0.0.1. So every request passes, in this order (one pure-ASGI middleware, a few dict
look-ups per request, so typing does not get slower):

1. Host: without --allow-remote, the Host header must name the bound loopback address or `localhost`
   with the port (421 otherwise). A page that rebinds its own host name to 127.0.0.1 (DNS rebinding)
   still sends its own name here, so it never reaches a route.
2. Origin: a request that carries one must come from the server's own page (the Origin is this Host) or a
   paired extension (403 otherwise; `null` included). `POST /v1/pair` also admits an unpaired extension
   origin, which still has to show the launch token.
3. Preflight: `OPTIONS` from an admitted extension origin is answered here; CORS headers name that origin
   alone, never `*`.
4. Credential: `/v1/*` needs `Authorization: Bearer` with the launch token, or a paired extension's key
   sent from its own origin (401 otherwise, before the body is read). `/health` without one says only
   whether the model is ready; a wrong one is refused there too. With --allow-remote every route needs
   it; the page and its files can carry it as `?token=` (the page's own links do, `routes.page`), since a
   `<script src>` cannot send a header and a cookie would also be sent to every other server on that
   host, whatever its port.
5. Body: a POST must be `application/json` (415 otherwise): a cross-site form or a `text/plain` fetch,
   which a browser sends without a preflight, never becomes a call.

Every response, refusals included, carries the security headers (`SECURITY_HEADERS`): a Content-Security-
Policy that allows only the page's own scripts, styles and connections and no framing, nosniff, no
referrer, and `Cache-Control: no-store` everywhere but the static files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from seqlab.serving.credentials import PairingStore, is_extension_origin, same_secret
from seqlab.serving.limits import send_error

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
CALLER = "seqlab.caller"  # the scope key under which the routes find who called (`Caller` or None)
PAIR_PATH = "/v1/pair"

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),  # frame-ancestors for browsers that predate it
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
NO_STORE = (b"cache-control", b"no-store")
PREFLIGHT_HEADERS = [(b"access-control-allow-methods", b"GET, POST, DELETE"),
                     (b"access-control-allow-headers", b"authorization, content-type"),
                     (b"access-control-max-age", b"600")]


@dataclass(frozen=True)
class Caller:
    """Who a request proved to be: the person (the launch token) or a paired extension (its key)."""

    kind: Literal["person", "extension"]
    origin: str | None = None  # the extension's origin

    @property
    def name(self) -> str:
        """A short name that keeps callers' sessions apart: "person" or the extension's origin."""
        return self.kind if self.origin is None else self.origin


def host_names(bound: str) -> tuple[str, ...]:
    """The host names a loopback server answers to: the usual three and the address it is bound to."""
    bound = f"[{bound}]" if ":" in bound and not bound.startswith("[") else bound
    return tuple(dict.fromkeys((*LOOPBACK_NAMES, bound.lower())))


class AccessPolicy:
    """What the gate checks, for one server: its token, port, bound host, remote mode and pairings."""

    def __init__(self, token: str, host: str, port: int, pairings: PairingStore, allow_remote: bool = False) -> None:
        self.token, self.port, self.allow_remote, self.pairings = token, port, allow_remote, pairings
        names = host_names(host)
        hosts = {f"{n}:{port}" for n in names}
        if port == 80:  # a browser leaves the default port out of Host
            hosts |= set(names)
        self.hosts = frozenset(hosts)

    def identify(self, authorization: str | None, origin: str | None) -> Caller | None:
        """The caller an `Authorization: Bearer` header proves, or None."""
        if not authorization or not authorization[:7].lower() == "bearer ":
            return None
        given = authorization[7:].strip()
        return self.identify_secret(given, origin)

    def identify_secret(self, given: str, origin: str | None) -> Caller | None:
        if not given:
            return None
        if same_secret(given, self.token):
            return Caller("person")
        paired = self.pairings.lookup(given)
        # a key counts only from its own extension; a request without an Origin is not a web page's
        if paired is not None and (origin is None or origin == paired.origin):
            return Caller("extension", paired.origin)
        return None

    def origin_allowed(self, origin: str, host: str, path: str) -> bool:
        if origin.lower() == f"http://{host}".lower():  # the server's own page
            return True
        if origin in self.pairings.origins:
            return True
        return path == PAIR_PATH and is_extension_origin(origin)


class AccessGuard:
    """The ASGI middleware that applies an `AccessPolicy` to every HTTP request (see the module docstring)."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy) -> None:
        self.app, self.policy = app, policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        p = self.policy
        headers: dict[bytes, bytes] = {}
        for k, v in scope["headers"]:
            headers.setdefault(k, v)  # the first of a repeated header: what a browser would have meant
        path: str = scope["path"]
        static = path.startswith("/static/")
        extra = [] if static else [NO_STORE]
        host = headers.get(b"host", b"").decode("latin-1").lower()
        if not p.allow_remote and host not in p.hosts:
            await _refuse(send, 421, f"this server answers only to {_names(p)}", extra)
            return
        origin_b = headers.get(b"origin")
        origin = origin_b.decode("latin-1") if origin_b is not None else None
        cors: list[tuple[bytes, bytes]] = []
        if origin is not None:
            if not p.origin_allowed(origin, host, path):
                await _refuse(send, 403, "requests from other web pages are refused", extra)
                return
            if is_extension_origin(origin):
                cors = [(b"access-control-allow-origin", origin_b), (b"vary", b"origin")]  # type: ignore[list-item]
        if scope["method"] == "OPTIONS" and cors:
            await send({"type": "http.response.start", "status": 204,
                        "headers": [*SECURITY_HEADERS, *extra, *cors, *PREFLIGHT_HEADERS]})
            await send({"type": "http.response.body", "body": b""})
            return
        auth = headers.get(b"authorization")
        caller = p.identify(auth.decode("latin-1") if auth is not None else None, origin)
        if caller is None and p.allow_remote and scope["method"] == "GET":
            given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[0]
            caller = p.identify_secret(given, origin)
        scope[CALLER] = caller
        # a credential that proves nothing is refused everywhere, /health included: a paired extension whose
        # pairing was removed learns so at once, instead of being answered as a stranger
        if caller is None and (path.startswith("/v1/") or p.allow_remote or auth is not None):
            await _refuse(send, 401, "this server needs its token: open the URL `seqlab serve` printed, or send "
                          "`Authorization: Bearer TOKEN` (the token is in the run's serve/server.json)", extra + cors)
            return
        if scope["method"] in ("POST", "PUT", "PATCH"):
            media = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
            if media != b"application/json":
                await _refuse(send, 415, "the body must be JSON sent as Content-Type: application/json",
                              extra + cors)
                return
        added = SECURITY_HEADERS + extra + cors

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *added]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _names(p: AccessPolicy) -> str:
    return " or ".join(sorted(p.hosts))


async def _refuse(send: Send, status: int, message: str, headers: list[tuple[bytes, bytes]]) -> None:
    """A JSON error in the shape of every other (`limits.error`), with the security headers."""
    await send_error(send, status, message, [*SECURITY_HEADERS, *headers])
