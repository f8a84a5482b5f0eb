"""A paired extension's side of `seqlab.serving.signing` and `sealing`, in Python: what extension/background.js
does with Web Crypto, for the tests that attack the gate (a replayed or altered request, another origin) and
for timing it."""

from __future__ import annotations

import hmac
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from seqlab.serving.sealing import seal
from seqlab.serving.signing import (
    b64,
    new_nonce,
    pairing_client_proof,
    pairing_secret,
    pairing_server_proof,
    request_signature,
    response_proof,
    unb64,
)


@dataclass
class Paired:
    """A pairing made as the extension makes it: the base URL, the origin, the pairing id and secret."""

    url: str
    origin: str
    id: str
    secret: bytes = field(repr=False)

    def authorization(self, method: str, target: str, body: bytes = b"", ts: int | None = None,
                      nonce: str | None = None, secret: bytes | None = None) -> tuple[str, str]:
        """(the SeqlabHMAC header for this request, its nonce)."""
        ts = int(time.time() * 1000) if ts is None else ts
        nonce = nonce or new_nonce()
        host = self.url.split("://", 1)[1]
        sig = request_signature(secret or self.secret, method, host, target, ts, nonce, body)
        return f"SeqlabHMAC id={self.id}, ts={ts}, nonce={nonce}, sig={b64(sig)}", nonce

    def sealed(self, method: str, target: str, body: Any, ts: int | None = None,
               nonce: str | None = None) -> tuple[str, str, bytes]:
        """(the SeqlabHMAC header, its nonce, the wire body): `body` as JSON sealed for this request
        (`sealing.seal`), then signed as the extension does; no body for None."""
        ts = int(time.time() * 1000) if ts is None else ts
        nonce = nonce or new_nonce()
        wire = b"" if body is None else seal(self.secret, method, target, ts, nonce, json.dumps(body).encode())
        header, _ = self.authorization(method, target, wire, ts=ts, nonce=nonce)
        return header, nonce, wire

    def request(self, client: httpx.Client, method: str, target: str, body: Any = None,
                origin: str | None = "") -> tuple[httpx.Response, bool]:
        """A signed request, its body sealed (from the paired origin unless `origin` says otherwise; None: no
        Origin) and whether its answer carries the server's proof."""
        header, nonce, raw = self.sealed(method, target, body)
        headers = {"authorization": header}
        if origin is not None:
            headers["origin"] = origin or self.origin
        if body is not None:
            headers["content-type"] = "application/json"
        r = client.request(method, self.url + target, content=raw, headers=headers)
        return r, proven(self.secret, nonce, r)


def proven(secret: bytes, nonce: str, r: httpx.Response) -> bool:
    """Whether `r` carries the proof that whoever answered holds `secret` (`signing.response_proof`)."""
    given = r.headers.get("seqlab-proof", "")
    return hmac.compare_digest(given, response_proof(secret, nonce, r.status_code, r.content))


def pair(url: str, pasted: str, origin: str, name: str = "tests") -> Paired:
    """Pair with the server at `url` as the extension does, proving `pasted` (the token of the printed URL)."""
    with httpx.Client(timeout=30) as client:
        sn = client.post(f"{url}/v1/pair/challenge", json={}, headers={"origin": origin}).json()["nonce"]
        cn = new_nonce()
        proof = b64(pairing_client_proof(pasted, origin, sn, cn))
        r = client.post(f"{url}/v1/pair", headers={"origin": origin},
                        json={"name": name, "server_nonce": sn, "client_nonce": cn, "proof": proof})
        r.raise_for_status()
    answer = r.json()
    back = unb64(answer["proof"]) or b""
    if not hmac.compare_digest(back, pairing_server_proof(pasted, origin, sn, cn, answer["id"])):
        raise AssertionError("the server did not prove it knows the pasted secret")
    return Paired(url, origin, answer["id"], pairing_secret(pasted, origin, sn, cn, answer["id"]))
