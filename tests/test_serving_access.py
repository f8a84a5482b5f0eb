"""The server admits only the person: a real server on loopback, attacked as a hostile page or program would.

Each attack is sent over a real socket to uvicorn (not through TestClient), with the headers a browser
would send for that attack; after them, the person's own view (/v1/stats) shows that nothing was computed.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import WebSocket
from serving_helpers import auth, gate_server, person_client, running_server, served
from signing_client import Paired, pair

from seqlab.serving.access import CSP
from seqlab.serving.app import ServerConfig
from seqlab.serving.credentials import PairingStore
from seqlab.serving.signing import NonceCache, b64, new_nonce, pairing_client_proof

EXT = "chrome-extension://abcdefghijklmnopabcdefghijklmnop"
BODY = {"prefix": "Hi Dana,\n\nCould you send me the report", "subject": "Report"}


@pytest.fixture(scope="module")
def server(word_run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ServerConfig]]:
    with gate_server(word_run_dir, tmp_path_factory.mktemp("access")) as served:
        yield served


def _computed(url: str, config: ServerConfig) -> int:
    return httpx.get(f"{url}/v1/stats", headers=auth(config)).json()["completions"]


def test_attacks_are_refused_before_anything_runs(server: tuple[str, ServerConfig]) -> None:
    url, config = server
    port = config.port
    token = auth(config)
    before = _computed(url, config)
    attacks: list[tuple[str, int, dict[str, str], bytes | None]] = [
        # DNS rebinding: the attacker's name now points at 127.0.0.1, and the browser sends that name
        ("rebound Host", 421, {"host": f"evil.example:{port}", "content-type": "application/json"}, None),
        ("rebound Host with the token", 421, {"host": f"evil.example:{port}", **token,
                                              "content-type": "application/json"}, None),
        ("right name, wrong port", 421, {"host": f"127.0.0.1:{port + 1}", "content-type": "application/json"}, None),
        # a page elsewhere calling across origins (a simple request: no preflight would stop it)
        ("foreign Origin", 403, {"origin": "http://evil.example", **token, "content-type": "application/json"}, None),
        ("opaque Origin (sandboxed frame, file://)", 403, {"origin": "null", **token,
                                                          "content-type": "application/json"}, None),
        ("another local port's page", 403, {"origin": f"http://127.0.0.1:{port + 1}", **token,
                                            "content-type": "application/json"}, None),
        ("unpaired extension", 403, {"origin": EXT, **token, "content-type": "application/json"}, None),
        # no credential, or a wrong one
        ("no token", 401, {"content-type": "application/json"}, None),
        ("wrong token", 401, {"authorization": "Bearer " + "A" * 43, "content-type": "application/json"}, None),
        ("token as Basic", 401, {"authorization": f"Basic {config.token}", "content-type": "application/json"},
         None),
        ("token cut short", 401, {"authorization": f"Bearer {config.token[:-1]}",
                                  "content-type": "application/json"}, None),
        # the body kinds a cross-site form or a no-preflight fetch can send
        ("text/plain body", 415, {**token, "content-type": "text/plain"}, None),
        ("form body", 415, {**token, "content-type": "application/x-www-form-urlencoded"}, b"prefix=Hi"),
        ("multipart body", 415, {**token, "content-type": "multipart/form-data; boundary=x"}, b"--x--"),
        ("no content type", 415, {**token}, None),
    ]
    seen = {}
    with httpx.Client(base_url=url, timeout=30) as client:
        for name, want, headers, content in attacks:
            for path in ("/v1/complete", "/v1/why"):
                body = content if content is not None else json.dumps({**BODY, "text": " to"}).encode()
                r = client.post(path, content=body, headers=headers)
                seen[(name, path)] = r.status_code
                assert r.status_code == want, (name, path, r.status_code, r.text)
                assert r.headers["content-type"] == "application/json" and r.json()["error"]
                assert r.headers["cache-control"] == "no-store"
                assert "access-control-allow-origin" not in r.headers
        # a token in the query string does not count for the API (it would end up in logs and histories)
        assert client.get(f"/v1/stats?token={config.token}").status_code == 401
    assert _computed(url, config) == before  # nothing reached the model
    print(json.dumps({f"{n} -> {p}": s for (n, p), s in seen.items()}, indent=1))  # for the closing note


def test_every_answer_carries_the_security_headers(server: tuple[str, ServerConfig]) -> None:
    url, config = server
    with httpx.Client(base_url=url, timeout=30) as client:
        answers = {
            "page": client.get("/"), "script": client.get("/static/compose.js"), "health": client.get("/health"),
            "stats": client.get("/v1/stats", headers=auth(config)), "missing": client.get("/nope"),
            "refused": client.get("/v1/stats"),
            "complete": client.post("/v1/complete", json=BODY, headers=auth(config)),
        }
    for name, r in answers.items():
        assert r.headers["content-security-policy"] == CSP, name
        assert "frame-ancestors 'none'" in CSP and "script-src 'self'" in CSP and "'unsafe-inline'" not in CSP
        assert r.headers["x-content-type-options"] == "nosniff", name
        assert r.headers["referrer-policy"] == "no-referrer", name
        assert r.headers["x-frame-options"] == "DENY", name
        assert "access-control-allow-origin" not in r.headers, name
    for name in ("stats", "complete", "refused", "health", "page"):
        assert answers[name].headers["cache-control"] == "no-store", name


def test_health_tells_a_stranger_only_whether_it_is_ready(server: tuple[str, ServerConfig]) -> None:
    url, config = server
    stranger = httpx.get(f"{url}/health")
    assert stranger.status_code == 200 and stranger.json() == {"status": "ok"}
    wrong = httpx.get(f"{url}/health", headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 401  # a credential that proves nothing is refused, not answered as a stranger
    person = httpx.get(f"{url}/health", headers=auth(config)).json()
    assert person["model"]["params"] > 0 and str(config.run_dir) in json.dumps(person)
    assert str(config.run_dir) not in stranger.text


def test_a_paired_extension_and_nobody_else(server: tuple[str, ServerConfig]) -> None:
    """Pairing proves the pasted token without sending it; then each request is signed, once, from its origin."""
    url, config = server
    with httpx.Client(base_url=url, timeout=30) as client:
        # the challenge and the pairing: an extension's origin, and a proof over a fresh challenge
        assert client.post("/v1/pair/challenge", json={}).status_code == 403  # no Origin: no extension
        own = {"origin": f"http://127.0.0.1:{config.port}"}
        assert client.post("/v1/pair/challenge", json={}, headers=own).status_code == 403  # the page is no extension
        pre = client.options("/v1/pair", headers={"origin": EXT, "access-control-request-method": "POST",
                                                  "access-control-request-headers": "authorization, content-type"})
        assert pre.status_code == 204 and pre.headers["access-control-allow-origin"] == EXT
        sn = client.post("/v1/pair/challenge", json={}, headers={"origin": EXT}).json()["nonce"]
        cn = new_nonce()
        wrong = {"name": "x", "server_nonce": sn, "client_nonce": cn,
                 "proof": b64(pairing_client_proof("not-the-token", EXT, sn, cn))}
        assert client.post("/v1/pair", json=wrong, headers={"origin": EXT}).status_code == 401
        right = {**wrong, "proof": b64(pairing_client_proof(config.token, EXT, sn, cn))}
        assert client.post("/v1/pair", json=right, headers={"origin": EXT}).status_code == 401  # challenge used up
        # (the bearer token alone pairs nothing: pairing needs the proof)
        assert client.post("/v1/pair", json={"name": "x"}, headers={"origin": EXT, **auth(config)}).status_code == 422
    ext = pair(url, config.token, EXT, "Chromium")
    file = config.pairing_file
    assert file is not None and stat.S_IMODE(file.stat().st_mode) == 0o600
    assert config.token not in file.read_text() and EXT in file.read_text()
    with httpx.Client(timeout=30) as client:
        done, proof = ext.request(client, "POST", "/v1/complete", BODY)
        assert done.status_code == 200 and proof and done.headers["access-control-allow-origin"] == EXT
        health, proof = ext.request(client, "GET", "/health", origin=None)
        assert proof and health.json()["model"]["params"] > 0
        # a captured request, sent again: refused (its nonce was seen), and so is one altered on the way
        header, _, wire = ext.sealed("POST", "/v1/complete", BODY)
        sent = {"authorization": header, "origin": EXT, "content-type": "application/json"}
        assert client.post(f"{url}/v1/complete", content=wire, headers=sent).status_code == 200
        assert client.post(f"{url}/v1/complete", content=wire, headers=sent).status_code == 401
        header, _, _ = ext.sealed("POST", "/v1/complete", BODY)
        _, _, changed = ext.sealed("POST", "/v1/complete", {**BODY, "prefix": "Another text"})
        assert client.post(f"{url}/v1/complete", content=changed,
                           headers={**sent, "authorization": header}).status_code == 401
        header, _, wire = ext.sealed("POST", "/v1/why", BODY)  # signed for another path
        assert client.post(f"{url}/v1/complete", content=wire,
                           headers={**sent, "authorization": header}).status_code == 401
        # a body signed but not sealed (plain JSON), or sealed for another request under a valid signature: 401
        for target, body in (("/v1/complete", json.dumps(BODY).encode()),
                             ("/v1/complete", ext.sealed("POST", "/v1/why", BODY)[2])):
            header, _ = ext.authorization("POST", target, body)
            refused = client.post(f"{url}{target}", content=body, headers={**sent, "authorization": header})
            assert refused.status_code == 401 and "sealed" in refused.json()["error"], refused.text
        # a wrong secret, a time outside the window, a malformed header: 401
        for bad in (ext.authorization("GET", "/v1/stats", secret=b"x" * 32)[0],
                    ext.authorization("GET", "/v1/stats", ts=int(time.time() * 1000) - 120_000)[0],
                    ext.authorization("GET", "/v1/stats", ts=int(time.time() * 1000) + 120_000)[0],
                    f"SeqlabHMAC id={ext.id}, ts=1, nonce=short, sig=x", f"Bearer {b64(ext.secret)}"):
            assert client.get(f"{url}/v1/stats", headers={"authorization": bad}).status_code == 401, bad
        # the signed request is good only from its own extension: another origin is 403 (not paired) or 401
        other = "chrome-extension://ponmlkjihgfedcbaponmlkjihgfedcba"
        assert ext.request(client, "POST", "/v1/complete", BODY, origin=other)[0].status_code == 403
        assert ext.request(client, "POST", "/v1/complete", BODY, origin=own["origin"])[0].status_code == 401
        # sessions are kept per caller: the extension's session name means nothing to the page
        sid = done.json()["session"]
        again = client.post(f"{url}/v1/complete", json={**BODY, "session": sid}, headers=auth(config)).json()
        assert again["session"] != sid
        # the person's token gets no proof: it is no pairing
        assert "seqlab-proof" not in client.get(f"{url}/health", headers=auth(config)).headers
        # a pairing removed behind the server's back (another server, an edited file) ends at once
        saved = file.read_text()
        file.write_text('{"paired": []}')
        assert ext.request(client, "GET", "/health")[0].status_code == 403  # its origin is no longer paired
        assert ext.request(client, "GET", "/health", origin=None)[0].status_code == 401
        file.write_text(saved)
        assert ext.request(client, "GET", "/health")[1]
        assert ext.request(client, "DELETE", "/v1/pair")[0].json() == {"ok": True}
        assert ext.request(client, "POST", "/v1/complete", BODY)[0].status_code == 403  # origin no longer paired
        assert ext.request(client, "POST", "/v1/complete", BODY, origin=None)[0].status_code == 401
    assert PairingStore(file).entries() == []


def test_an_older_bearer_pairing_counts_for_nothing(tmp_path: Path) -> None:
    """paired.json as the bearer-key pairing wrote it: the row pairs nothing, so that extension pairs again."""
    file = tmp_path / "paired.json"
    file.write_text(json.dumps({"paired": [{"origin": EXT, "name": "old", "created": 1.0,
                                            "key_sha256": "ab" * 32}]}))
    assert PairingStore(file).entries() == [] and PairingStore(file).origins == frozenset()


def test_the_nonce_cache_refuses_a_replay_and_forgets_only_expired_nonces() -> None:
    cache = NonceCache(window_ms=1000, limit=2)
    assert cache.add("a", ts=0, now_ms=0) and not cache.add("a", ts=0, now_ms=500)
    assert cache.add("b", ts=400, now_ms=500) and not cache.add("c", ts=500, now_ms=500)  # full: refused
    assert cache.add("c", ts=1100, now_ms=1100) and len(cache) == 2  # "a" expired at 1000, "b" kept
    assert not cache.add("b", ts=400, now_ms=1100)


def test_a_signed_request_is_good_only_to_this_server_on_this_port(word_run_dir: Path, tmp_path: Path) -> None:
    """One captured by a program on the port, sent to the server started there later (or to another server
    sharing paired.json on another port) within its time window: 401 all the same."""
    config = ServerConfig(word_run_dir, min_confidence=0.0, log_dir=tmp_path / "log",
                          pairing_file=tmp_path / "paired.json")
    with running_server(config) as first:
        ext = pair(first, config.token, EXT)
        with httpx.Client(timeout=30) as client:
            assert ext.request(client, "GET", "/health")[1]
            captured, _ = ext.authorization("GET", "/health")  # never sent to this server: its nonce is new
    second_config = ServerConfig(word_run_dir, min_confidence=0.0, log_dir=tmp_path / "log2",
                                 pairing_file=tmp_path / "paired.json")
    with running_server(second_config) as second:
        moved = Paired(second, EXT, ext.id, ext.secret)
        with httpx.Client(timeout=30) as client:
            # the later server on another port: signed for the first one's Host, and before it started
            assert client.get(f"{second}/health", headers={"authorization": captured}).status_code == 401
            header, _ = ext.authorization("GET", "/health")  # after it started, but for the other Host
            assert client.get(f"{second}/health", headers={"authorization": header}).status_code == 401
            assert moved.request(client, "GET", "/health")[1]  # the same pairing, signed for this server: fine


def test_websockets_are_refused_before_any_app_code(word_run_dir: Path, tmp_path: Path) -> None:
    """No route takes a websocket; one added to the app is still never reached, whatever the headers."""
    config = ServerConfig(word_run_dir, min_confidence=0.0, log_dir=tmp_path / "log",
                          pairing_file=tmp_path / "paired.json")
    reached: list[str] = []

    def with_socket(app: Any) -> Any:
        async def hello(ws: WebSocket) -> None:
            reached.append(ws.url.path)
            await ws.accept()
            await ws.send_text("hello")
            await ws.close()

        app.add_api_websocket_route("/v1/socket", hello)
        return app

    with running_server(config, wrap=with_socket) as url:
        for host in (f"127.0.0.1:{config.port}", f"evil.example:{config.port}"):
            with socket.create_connection(("127.0.0.1", config.port), timeout=30) as conn:
                conn.sendall((f"GET /v1/socket?token={config.token} HTTP/1.1\r\nHost: {host}\r\n"
                              "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                              f"Sec-WebSocket-Key: {base64.b64encode(b'0123456789abcdef').decode()}\r\n"
                              f"Authorization: Bearer {config.token}\r\n\r\n").encode())
                status = conn.recv(4096).split(b"\r\n", 1)[0]
            assert status.startswith(b"HTTP/1.1 403"), status
        assert httpx.get(f"{url}/health").status_code == 200
    assert reached == []


def test_remote_mode_needs_the_token_on_every_route(word_run_dir: Path, tmp_path: Path) -> None:
    config = ServerConfig(word_run_dir, min_confidence=0.0, log_dir=tmp_path / "log", allow_remote=True,
                          pairing_file=tmp_path / "paired.json")
    with person_client(config) as client:
        client.headers.pop("authorization")
        for path in ("/", "/static/compose.js", "/health", "/openapi.json"):
            assert client.get(path).status_code == 401, path
        # any Host: the token, not the name, is what admits a request from another machine
        page = client.get(f"/?token={config.token}", headers={"host": "192.0.2.7:8000"})
        assert page.status_code == 200
        assert f'src="/static/compose.js?token={config.token}"' in page.text  # the page's own files carry it
        assert client.get(f"/static/compose.js?token={config.token}").status_code == 200
        assert client.get("/static/compose.js?token=wrong").status_code == 401
        # never for the API: a token in a URL ends up in histories and logs
        for path in ("/v1/stats", "/health"):
            assert client.get(f"{path}?token={config.token}").status_code == 401, path


def test_serve_refuses_a_reachable_address_unless_asked(word_run_dir: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "seqlab", "serve", str(word_run_dir), "--host", "0.0.0.0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--allow-remote" in r.stderr and "Traceback" not in r.stderr


def test_the_token_file_is_the_persons_alone_and_goes_with_the_server(word_run_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(word_run_dir, run, ignore=shutil.ignore_patterns("serve"))
    with served(run, tmp_path / "log") as s:
        info = run / "serve" / "server.json"  # in the run's serve/ folder, wherever --log puts the event log
        assert stat.S_IMODE(info.stat().st_mode) == 0o600 and stat.S_IMODE(info.parent.stat().st_mode) == 0o700
        saved = json.loads(info.read_text())
        assert saved["token"] == s.token and saved["url"] == s.page and len(s.token) >= 43
        assert httpx.get(f"{s.url}/v1/stats", headers={"Authorization": f"Bearer {saved['token']}"}).status_code == 200
    assert not info.exists()
