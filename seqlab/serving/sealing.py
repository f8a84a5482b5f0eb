"""Sealed request bodies: what a paired extension sends is readable only by the server that holds the pairing.

A signed request (`signing.py`) proves who sent it, but its body still travels as plain JSON: whatever
listens on the paired port (a program that took it after the server stopped) would read the person's text
before any proof could tell the extension it is not its server. So the extension seals every body:

- key: K = HMAC-SHA256(S, "seqlab-seal-v1"), S the pairing secret; both sides derive it, nothing new travels.
  AES-256-GCM (NIST SP 800-38D) with a fresh random 96-bit IV per request;
- additional data: the lines `seqlab-seal-v1`, method, path and query, ts, nonce of the request's own
  signed header, so a sealed body opens only for the request it was sealed for (not moved to another
  path, nor to a later request);
- on the wire: the JSON `{"iv": B64, "ciphertext": B64}` (unpadded base64url; the ciphertext ends with the
  16-byte GCM tag), still `application/json`, and signed as any body is.

The gate (`access.py`) opens it after the signature holds and before any route sees the JSON; a signed body
that does not open is refused as a bad signature is. A fake server gets only the sealed bytes, which it
cannot open without S, and cannot prove an answer (`signing.response_proof`), so nothing readable leaves
and nothing it says is shown.
"""

from __future__ import annotations

import json
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from seqlab.serving.signing import b64, mac, unb64

SEAL = "seqlab-seal-v1"
IV_BYTES = 12  # GCM's 96-bit IV: random per request, never reused with a key in practice (2^-32 after 2^32 seals)
TAG_BYTES = 16


def seal_key(secret: bytes) -> bytes:
    """The AES-256 key of a pairing: HMAC-SHA256(S, "seqlab-seal-v1"), 32 bytes."""
    return mac(secret, SEAL)


def additional_data(method: str, target: str, ts: int, nonce: str) -> bytes:
    """GCM's additional data: the signed header's fields, which tie the body to its one request."""
    return "\n".join((SEAL, method.upper(), target, str(ts), nonce)).encode("utf-8")


def seal(secret: bytes, method: str, target: str, ts: int, nonce: str, plain: bytes,
         iv: bytes | None = None) -> bytes:
    """The wire body `{"iv", "ciphertext"}` of `plain` (what the extension's `sealed()` makes; Python callers
    and the tests seal with this). `iv` only for tests that need a fixed one."""
    iv = os.urandom(IV_BYTES) if iv is None else iv
    box = AESGCM(seal_key(secret)).encrypt(iv, plain, additional_data(method, target, ts, nonce))
    return json.dumps({"iv": b64(iv), "ciphertext": b64(box)}, separators=(",", ":")).encode("ascii")


def open_sealed(secret: bytes, method: str, target: str, ts: int, nonce: str, body: bytes) -> bytes | None:
    """The plain body sealed in `body` for this request, or None: not a sealed body, or sealed with another
    key or for another request, or altered."""
    try:
        envelope = json.loads(body)
    except ValueError:
        return None
    if not isinstance(envelope, dict) or set(envelope) != {"iv", "ciphertext"}:
        return None
    iv, box = unb64(envelope["iv"]), unb64(envelope["ciphertext"])
    if iv is None or box is None or len(iv) != IV_BYTES or len(box) < TAG_BYTES:
        return None
    try:
        return AESGCM(seal_key(secret)).decrypt(iv, box, additional_data(method, target, ts, nonce))
    except InvalidTag:
        return None
