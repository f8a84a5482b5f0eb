"""How a paired browser extension and the server prove themselves to each other, with no reusable key on the wire.

The extension and the server share a pairing secret S (32 bytes), derived once at pairing from the secret in
the URL `seqlab serve` printed, which itself never travels (`pairing_*` below). After that:

- every request of the extension carries
  `Authorization: SeqlabHMAC id=ID, ts=MS, nonce=N, sig=SIG`, SIG = HMAC-SHA256(S, the lines
  `seqlab-request-v1`, method, Host, path and query, ts, nonce, hex SHA-256 of the body). The server
  accepts it within `WINDOW_MS` of its clock, not from before it started, and refuses a nonce it has seen
  (`NonceCache`), so a captured request is worth nothing: not to this server, not to one started later on
  the port, not to another server on another port that shares the pairing; a changed body or path breaks
  the signature;
- every answer to such a request carries `Seqlab-Proof: HMAC(S, seqlab-request-v1's nonce, status, body
  digest)` (`response_proof`): the extension uses an answer (ghost text, `learning`) only when the proof
  holds, so whatever else listens on the port can show nothing and is told nothing.

Pairing (two requests, `routes.pair_challenge` and `routes.pair`), with P the pasted secret and O the
extension's origin: the server hands out a one-time nonce SN; the extension sends its own nonce CN and
HMAC(P, pair-client, O, SN, CN); the server finds the pasted secret that proof matches
(`AccessPolicy.pasted_secret`), names the pairing ID and answers HMAC(P, pair-server, O, SN, CN, ID), which
the extension checks before keeping anything; both then take S = HMAC(P, pair-secret, O, SN, CN, ID).
A fake server learns neither P nor S: only MACs over nonces, useless without P.

Text is joined with newlines and MAC'd as UTF-8; nonces, ids and MACs travel as unpadded base64url.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import heapq
import hmac
import re
import secrets
from dataclasses import dataclass

SCHEME = "seqlabhmac"  # the Authorization scheme, compared without case
PROOF_HEADER = b"seqlab-proof"
REQUEST = "seqlab-request-v1"
RESPONSE = "seqlab-response-v1"
PAIR_CLIENT = "seqlab-pair-client-v1"
PAIR_SERVER = "seqlab-pair-server-v1"
PAIR_SECRET = "seqlab-pair-secret-v1"
WINDOW_MS = 60_000  # how far a request's ts may be from the server's clock (one machine: one clock)
MAX_NONCES = 100_000  # requests remembered within the window; past it new ones wait (a flood, not typing)
SECRET_BYTES = 32
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,128}")
_ID = re.compile(r"[A-Za-z0-9_-]{8,64}")


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64(text: str) -> bytes | None:
    """Unpadded (or padded) base64url, or None for anything else."""
    if not isinstance(text, str) or not re.fullmatch(r"[A-Za-z0-9_-]*={0,2}", text):
        return None
    try:
        return base64.urlsafe_b64decode(text.rstrip("=") + "=" * (-len(text.rstrip("=")) % 4))
    except (binascii.Error, ValueError):
        return None


def mac(key: bytes, *parts: str) -> bytes:
    """HMAC-SHA256 of `parts` joined by newlines."""
    return hmac.new(key, "\n".join(parts).encode("utf-8"), hashlib.sha256).digest()


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def new_nonce() -> str:
    return secrets.token_urlsafe(18)


def is_nonce(text: object) -> bool:
    return isinstance(text, str) and _TOKEN.fullmatch(text) is not None


@dataclass(frozen=True)
class Signed:
    """The fields of a `SeqlabHMAC` Authorization header."""

    id: str
    ts: int
    nonce: str
    sig: bytes


def parse_signed(authorization: str) -> Signed | None:
    """The `SeqlabHMAC id=..., ts=..., nonce=..., sig=...` fields, or None if the header is anything else."""
    scheme, _, rest = authorization.strip().partition(" ")
    if scheme.lower() != SCHEME:
        return None
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, eq, value = part.strip().partition("=")
        if not eq or name in fields:
            return None
        fields[name] = value.strip()
    if set(fields) != {"id", "ts", "nonce", "sig"}:
        return None
    sig = unb64(fields["sig"])
    if (not _ID.fullmatch(fields["id"]) or not fields["ts"].isdigit() or len(fields["ts"]) > 15
            or not is_nonce(fields["nonce"]) or sig is None or len(sig) != 32):
        return None
    return Signed(fields["id"], int(fields["ts"]), fields["nonce"], sig)


def request_signature(secret: bytes, method: str, host: str, target: str, ts: int, nonce: str,
                      body: bytes) -> bytes:
    """What a signed request's `sig` must be: `host` is its Host header (as the URL names it), `target` the
    path and, if any, `?query`."""
    return mac(secret, REQUEST, method.upper(), host.lower(), target, str(ts), nonce, body_digest(body))


def response_proof(secret: bytes, nonce: str, status: int, body: bytes) -> str:
    """The `Seqlab-Proof` of an answer to the signed request with `nonce`."""
    return b64(mac(secret, RESPONSE, nonce, str(status), body_digest(body)))


def pairing_client_proof(pasted: str, origin: str, server_nonce: str, client_nonce: str) -> bytes:
    return mac(pasted.encode("utf-8"), PAIR_CLIENT, origin, server_nonce, client_nonce)


def pairing_server_proof(pasted: str, origin: str, server_nonce: str, client_nonce: str, pairing_id: str) -> bytes:
    return mac(pasted.encode("utf-8"), PAIR_SERVER, origin, server_nonce, client_nonce, pairing_id)


def pairing_secret(pasted: str, origin: str, server_nonce: str, client_nonce: str, pairing_id: str) -> bytes:
    return mac(pasted.encode("utf-8"), PAIR_SECRET, origin, server_nonce, client_nonce, pairing_id)


class NonceCache:
    """The nonces of the signed requests accepted within the time window, so none is accepted twice.

    A nonce is kept until its request's ts leaves the window (then the ts check refuses it anyway); at most
    `limit` at once, past which `add` refuses until some expire: a replay is never let through to make room."""

    def __init__(self, window_ms: int = WINDOW_MS, limit: int = MAX_NONCES) -> None:
        self.window_ms, self.limit = window_ms, limit
        self._seen: set[str] = set()
        self._expiry: list[tuple[int, str]] = []

    def add(self, key: str, ts: int, now_ms: int) -> bool:
        """Remember `key` (a request's ts); False if it was seen already or the cache is full."""
        while self._expiry and self._expiry[0][0] < now_ms:
            self._seen.discard(heapq.heappop(self._expiry)[1])
        if key in self._seen or len(self._seen) >= self.limit:
            return False
        self._seen.add(key)
        heapq.heappush(self._expiry, (ts + self.window_ms, key))
        return True

    def __len__(self) -> int:
        return len(self._seen)
