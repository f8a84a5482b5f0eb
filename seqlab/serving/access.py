"""The gate in front of every route: a request proves it comes from the person before anything runs.

A model trained on a mailbox is that mailbox in lossy form, and any web page the person visits can send
requests to 127.0.0.1. So every request passes, in this order (one pure-ASGI middleware, a few dict
look-ups per request, so typing does not get slower):

1. Host: without --allow-remote, the Host header must name the bound loopback address or `localhost`
   with the port (421 otherwise). A page that rebinds its own host name to 127.0.0.1 (DNS rebinding)
   still sends its own name here, so it never reaches a route.
2. Origin: a request that carries one must come from the server's own page (the Origin is this Host) or a
   paired extension (403 otherwise; `null` included). The pairing routes also admit an unpaired extension
   origin, which still has to prove it holds the pasted secret (`signing.py`).
3. Preflight: `OPTIONS` from an admitted extension origin is answered here; CORS headers name that origin
   alone, never `*`.
4. Credential: `/v1/*` needs `Authorization: Bearer` with the launch token (or the compose page's
   credential, traded once for the printed link's one-time code: `login_codes.py`), or a paired extension's
   signed request (`Authorization: SeqlabHMAC ...`, `signing.py`: fresh, never seen before, signed over
   method, path, time, nonce and body with the pairing's secret, from the paired origin when it names
   one, its body sealed for that request with the pairing's key and opened here: `sealing.py`); 401
   otherwise, before any route runs. The answer to a signed request carries `Seqlab-Proof`, by
   which the extension knows its own server answered. `/health` without a credential says only whether
   the model is ready; a wrong one is refused there too. With --allow-remote every route needs it; the
   page and its files (never `/v1/*`) can carry it as `?token=` (the page's own links do, `routes.page`),
   since a `<script src>` cannot send a header and a cookie would also be sent to every other server on
   that host, whatever its port.
5. Body: a POST must be `application/json` (415 otherwise): a cross-site form or a `text/plain` fetch,
   which a browser sends without a preflight, never becomes a call.

Any other kind of ASGI scope than HTTP and lifespan (a websocket) is refused before any app code runs.

Every response, refusals included, carries the security headers (`SECURITY_HEADERS`): a Content-Security-
Policy that allows only the page's own scripts, styles and connections and no framing, nosniff, no
referrer, and `Cache-Control: no-store` everywhere but the static files.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from seqlab.serving.credentials import PairingStore, is_extension_origin, same_secret
from seqlab.serving.limits import send_error
from seqlab.serving.login_codes import LoginCodes
from seqlab.serving.sealing import open_sealed
from seqlab.serving.signing import PROOF_HEADER, WINDOW_MS, NonceCache, parse_signed, request_signature, response_proof

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
CALLER = "seqlab.caller"  # the scope key under which the routes find who called (`Caller` or None)
PAIR_PATH = "/v1/pair"
PAIR_PATHS = (PAIR_PATH, "/v1/pair/challenge")  # need no credential: the pasted secret is proven in the body
SIGNED_BODY_MAX = 64 * 1024  # the routes' own limit (routes.MAX_BODY_BYTES): a signed body is read here whole
PAIR_CHALLENGE_S = 60.0
MAX_PAIR_CHALLENGES = 64

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
    """Who a request proved to be: the person (the launch token) or a paired extension (a signed request)."""

    kind: Literal["person", "extension"]
    origin: str | None = None  # the extension's origin
    pairing: str | None = None  # the extension's pairing id

    @property
    def name(self) -> str:
        """A short name that keeps callers' sessions apart: "person" or the extension's origin."""
        return self.kind if self.origin is None else self.origin


def is_loopback(host: str) -> bool:
    """Whether an address to bind (`seqlab serve --host`) is this machine alone: `localhost` or a loopback IP.
    Only such a server runs without --allow-remote, and its gate then admits only the names of `host_names`."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_names(bound: str) -> tuple[str, ...]:
    """The host names a loopback server answers to: the usual three and the address it is bound to."""
    bound = f"[{bound}]" if ":" in bound and not bound.startswith("[") else bound
    return tuple(dict.fromkeys((*LOOPBACK_NAMES, bound.lower())))


class AccessPolicy:
    """What the gate checks, for one server: its token, port, bound host, remote mode and pairings."""

    def __init__(self, token: str, host: str, port: int, pairings: PairingStore, allow_remote: bool = False,
                 login: LoginCodes | None = None) -> None:
        self.token, self.port, self.allow_remote, self.pairings = token, port, allow_remote, pairings
        self.login = login  # the compose page's one-time codes and the credentials traded for them
        names = host_names(host)
        hosts = {f"{n}:{port}" for n in names}
        if port == 80:  # a browser leaves the default port out of Host
            hosts |= set(names)
        self.hosts = frozenset(hosts)
        self.nonces = NonceCache()
        # nothing signed before this server started counts: the nonces seen by an earlier one are not known here
        self.started_ms = int(time.time() * 1000)
        self._challenges: dict[str, float] = {}  # pairing challenges handed out: nonce -> when it lapses

    def identify(self, authorization: str | None, origin: str | None) -> Caller | None:
        """The caller an `Authorization: Bearer` header proves (the person's launch token), or None."""
        if not authorization or not authorization[:7].lower() == "bearer ":
            return None
        return self.identify_secret(authorization[7:].strip(), origin)

    def identify_secret(self, given: str, origin: str | None) -> Caller | None:
        if given and self.login is not None and self.login.is_credential(given):
            return Caller("person")  # the compose page, logged in with a one-time code (`login_codes.py`)
        return Caller("person") if given and same_secret(given, self.token) else None

    def pasted_secret(self, matches: Callable[[str], bool]) -> str | None:
        """The pairing secret the person pasted (from the URL `seqlab serve` printed) that `matches` accepts, or
        None. The extension proves it holds one without sending it (`signing.pairing_client_proof`), so this
        tries each secret that may pair: the launch token, and each outstanding one-time code of the printed
        compose link (`login_codes.py`), which pairing spends."""
        if matches(self.token):
            return self.token
        return self.login.take_matching(matches) if self.login is not None else None

    def pairing_challenge(self) -> str:
        """A fresh one-time nonce for a pairing to prove itself over (a pairing cannot be replayed)."""
        now = time.monotonic()
        self._challenges = {n: t for n, t in self._challenges.items() if t > now}
        while len(self._challenges) >= MAX_PAIR_CHALLENGES:
            self._challenges.pop(next(iter(self._challenges)))
        nonce = secrets.token_urlsafe(18)
        self._challenges[nonce] = now + PAIR_CHALLENGE_S
        return nonce

    def take_challenge(self, nonce: str) -> bool:
        """Whether `nonce` is a pairing challenge handed out lately and not used; it is used up either way."""
        lapses = self._challenges.pop(nonce, None)
        return lapses is not None and lapses > time.monotonic()

    def verify_signed(self, authorization: str, method: str, host: str, target: str, origin: str | None,
                      body: bytes) -> tuple[Caller, bytes, str, bytes] | str:
        """A paired extension's signed request: (the caller, the pairing's secret, the request's nonce, its
        body opened), or why it is refused. A body must be sealed for this request (`sealing.py`): one that
        does not open is refused as a wrong signature is. The nonce is remembered only for a request whose
        signature holds and whose body opens."""
        signed = parse_signed(authorization)
        if signed is None:
            return "a malformed SeqlabHMAC header"
        paired = self.pairings.lookup(signed.id)
        if paired is None:
            return "this extension is not paired with this server: pair it again"
        if origin is not None and origin != paired.origin:
            return "a signed request from another origin than the paired one"
        now = int(time.time() * 1000)
        if abs(now - signed.ts) > WINDOW_MS or signed.ts < self.started_ms:
            return "a signed request out of its time window"
        expected = request_signature(paired.secret, method, host, target, signed.ts, signed.nonce, body)
        if not hmac.compare_digest(expected, signed.sig):
            return "a wrong signature"
        plain = open_sealed(paired.secret, method, target, signed.ts, signed.nonce, body) if body else b""
        if plain is None:
            return "a body not sealed for this request with the pairing's key"
        if not self.nonces.add(f"{signed.id}\x00{signed.nonce}", signed.ts, now):
            return "a signed request seen before (or too many at once)"
        return Caller("extension", paired.origin, paired.id), paired.secret, signed.nonce, plain

    def origin_allowed(self, origin: str, host: str, path: str) -> bool:
        if origin.lower() == f"http://{host}".lower():  # the server's own page
            return True
        if origin in self.pairings.origins:
            return True
        return path in PAIR_PATHS and is_extension_origin(origin)


class AccessGuard:
    """The ASGI middleware that applies an `AccessPolicy` to every HTTP request (see the module docstring)."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy) -> None:
        self.app, self.policy = app, policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # a websocket (or any later kind): no route here takes one
            if scope["type"] == "websocket":
                await receive()  # websocket.connect; closing before accepting answers the handshake 403
                await send({"type": "websocket.close", "code": 1008})
            return
        p = self.policy
        headers: dict[bytes, bytes] = {}
        for k, v in scope["headers"]:
            headers.setdefault(k, v)  # the first of a repeated header: what a browser would have meant
        path: str = scope["path"]
        extra = [] if path.startswith("/static/") else [NO_STORE]
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
                cors = [(b"access-control-allow-origin", origin_b), (b"vary", b"origin"),  # type: ignore[list-item]
                        (b"access-control-expose-headers", PROOF_HEADER)]
        if scope["method"] == "OPTIONS" and cors:
            await send({"type": "http.response.start", "status": 204,
                        "headers": [*SECURITY_HEADERS, *extra, *cors, *PREFLIGHT_HEADERS]})
            await send({"type": "http.response.body", "body": b""})
            return
        await self._admit(scope, receive, send, headers, host, origin, extra + cors)

    async def _admit(self, scope: Scope, receive: Receive, send: Send, headers: dict[bytes, bytes], host: str,
                     origin: str | None, extra: list[tuple[bytes, bytes]]) -> None:
        """The gate's second half, for a request whose Host and Origin passed: who sent it (a signed request,
        the token, or under --allow-remote the page's token in its URL), then its body's type. `extra`: the
        headers every answer to it carries besides `SECURITY_HEADERS` (no-store, CORS)."""
        p = self.policy
        path: str = scope["path"]
        static = path.startswith("/static/")
        auth = headers.get(b"authorization")
        authorization = auth.decode("latin-1") if auth is not None else None
        proof: tuple[bytes, str] | None = None  # a signed request's secret and nonce: its answer is proven
        if authorization is not None and authorization.lstrip()[:11].lower() == "seqlabhmac ":
            signed = await _signed_request(p, scope, receive, authorization, host, origin)
            if len(signed) == 2:  # refused: (status, why)
                await _refuse(send, signed[0], signed[1], extra)
                return
            caller, secret, nonce, scope, receive = signed
            proof = (secret, nonce)
        else:
            caller = p.identify(authorization, origin)
        # the page and its files under --allow-remote only (a <script src> sends no header), never the API
        if caller is None and p.allow_remote and scope["method"] == "GET" and (path == "/" or static):
            given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[0]
            caller = p.identify_secret(given, origin)
        scope[CALLER] = caller
        pairing = scope["method"] == "POST" and path in PAIR_PATHS and auth is None
        # a credential that proves nothing is refused everywhere, /health included: a paired extension whose
        # pairing was removed learns so at once, instead of being answered as a stranger
        if caller is None and not pairing and (path.startswith("/v1/") or p.allow_remote or auth is not None):
            await _refuse(send, 401, "this server needs its token: open the URL `seqlab serve` printed, or send "
                          "`Authorization: Bearer TOKEN` (the token is in the run's serve/server.json)", extra)
            return
        if proof is not None:
            send = _proving(send, *proof)
        if scope["method"] in ("POST", "PUT", "PATCH"):
            media = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
            if media != b"application/json":
                await _refuse(send, 415, "the body must be JSON sent as Content-Type: application/json", extra)
                return
        added = SECURITY_HEADERS + extra

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *added]
            await send(message)

        await self.app(scope, receive, send_with_headers)

async def _signed_request(p: AccessPolicy, scope: Scope, receive: Receive, authorization: str, host: str,
                          origin: str | None) -> tuple[int, str] | tuple[Caller, bytes, str, Scope, Receive]:
    """A signed request read whole and checked (`AccessPolicy.verify_signed`): (the caller, the pairing's secret,
    the nonce, and the scope and receive that give the app the opened body), or (status, why) to refuse it."""
    too_large = (413, f"the request body is larger than {SIGNED_BODY_MAX} bytes")
    declared = next((v for k, v in scope["headers"] if k == b"content-length"), b"0")
    if not declared.isdigit() or int(declared) > SIGNED_BODY_MAX:
        return too_large
    body = await _read_body(receive, SIGNED_BODY_MAX)
    if body is None:
        return too_large
    query = scope.get("query_string", b"").decode("latin-1")
    verified = p.verify_signed(authorization, scope["method"], host, scope["path"] + (f"?{query}" if query else ""),
                               origin, body)
    if isinstance(verified, str):
        return 401, f"refused: {verified}"
    caller, secret, nonce, plain = verified
    if plain != body:  # the route reads the opened JSON: its length is what Content-Length now says
        scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k != b"content-length"]
                 + [(b"content-length", str(len(plain)).encode())]}
    return caller, secret, nonce, scope, replay_body(plain, receive)


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None past `limit` bytes (a signed request is verified over its body)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)  # the client left: the app sees an empty body and its disconnect
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the app `body` (already read) first, then whatever comes next (a disconnect)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _proving(send: Send, secret: bytes, nonce: str) -> Send:
    """A `send` that holds the answer back until its body is whole, then sends it with its `Seqlab-Proof`
    (answers to the extension are small JSON)."""
    start: Message = {}
    chunks: list[bytes] = []

    async def proving(message: Message) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
            return
        if message["type"] != "http.response.body":
            await send(message)
            return
        chunks.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        body = b"".join(chunks)
        headers = [*start.get("headers", []), (PROOF_HEADER, response_proof(secret, nonce, start["status"],
                                                                            body).encode())]
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    return proving


def _names(p: AccessPolicy) -> str:
    return " or ".join(sorted(p.hosts))


async def _refuse(send: Send, status: int, message: str, headers: list[tuple[bytes, bytes]]) -> None:
    """A JSON error in the shape of every other (`limits.error`), with the security headers."""
    await send_error(send, status, message, [*SECURITY_HEADERS, *headers])
