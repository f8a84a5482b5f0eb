"""Sealed request bodies (`seqlab.serving.sealing`): what is sealed for one request opens for it alone, with the
pairing's key alone, and unaltered; the key is the HMAC the extension derives with Web Crypto."""

from __future__ import annotations

import hashlib
import hmac
import json

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given, settings
from hypothesis import strategies as st

from seqlab.serving.sealing import IV_BYTES, additional_data, open_sealed, seal, seal_key
from seqlab.serving.signing import b64, unb64

SECRET = bytes(range(32))
REQUEST = ("POST", "/v1/complete", 1_700_000_000_000, "n0nce-n0nce-n0nce-n0")
PLAIN = json.dumps({"prefix": "Hi Dana,\n\nCould you send me the rep", "subject": "Quarterly report"}).encode()


def test_the_key_and_the_box_are_the_documented_hmac_and_aes_gcm() -> None:
    """K = HMAC-SHA256(S, "seqlab-seal-v1") and the box is AES-GCM over the signed fields, computed here by
    hand: what extension/background.js computes with crypto.subtle."""
    key = hmac.new(SECRET, b"seqlab-seal-v1", hashlib.sha256).digest()
    assert seal_key(SECRET) == key and len(key) == 32
    iv = bytes(IV_BYTES)
    wire = json.loads(seal(SECRET, *REQUEST, PLAIN, iv=iv))
    aad = b"seqlab-seal-v1\nPOST\n/v1/complete\n1700000000000\nn0nce-n0nce-n0nce-n0"
    assert additional_data(*REQUEST) == aad
    assert wire == {"iv": b64(iv), "ciphertext": b64(AESGCM(key).encrypt(iv, PLAIN, aad))}


def test_a_sealed_body_opens_only_for_its_own_request_and_key() -> None:
    wire = seal(SECRET, *REQUEST, PLAIN)
    assert open_sealed(SECRET, *REQUEST, wire) == PLAIN
    assert b"Dana" not in wire and b"Quarterly" not in wire
    method, target, ts, nonce = REQUEST
    for other in (("GET", target, ts, nonce), (method, "/v1/sent", ts, nonce), (method, target, ts + 1, nonce),
                  (method, target, ts, "another-nonce-000000")):
        assert open_sealed(SECRET, *other, wire) is None, other
    assert open_sealed(b"\x01" * 32, *REQUEST, wire) is None
    assert seal(SECRET, *REQUEST, PLAIN) != wire  # a fresh IV each time


def test_what_is_not_a_sealed_body_opens_to_nothing() -> None:
    box = json.loads(seal(SECRET, *REQUEST, PLAIN))
    for body in (PLAIN, b"", b"not json", b"[]", json.dumps({"iv": box["iv"]}).encode(),
                 json.dumps({**box, "extra": 1}).encode(), json.dumps({**box, "iv": b64(b"short")}).encode(),
                 json.dumps({**box, "ciphertext": "!!"}).encode(), json.dumps({**box, "iv": 5}).encode(),
                 json.dumps({**box, "ciphertext": b64(b"tiny")}).encode()):
        assert open_sealed(SECRET, *REQUEST, body) is None, body


@settings(max_examples=60, deadline=None)
@given(plain=st.binary(max_size=300), flip=st.integers(min_value=0))
def test_any_body_round_trips_and_any_flipped_bit_is_refused(plain: bytes, flip: int) -> None:
    wire = seal(SECRET, *REQUEST, plain)
    assert open_sealed(SECRET, *REQUEST, wire) == plain
    box = json.loads(wire)
    raw = bytearray(unb64(box["ciphertext"]) or b"")
    raw[flip % len(raw)] ^= 1 << (flip % 8)
    altered = json.dumps({**box, "ciphertext": b64(bytes(raw))}).encode()
    assert open_sealed(SECRET, *REQUEST, altered) is None
