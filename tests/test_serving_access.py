"""The server admits only the person: a real server on loopback, attacked as a hostile page or program would.

Each attack is sent over a real socket to uvicorn (not through TestClient), with the headers a browser
would send for that attack; after them, the person's own view (/v1/stats) shows that nothing was computed.
"""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serving_helpers import auth, person_client, running_server, served

from seqlab.serving.access import CSP
from seqlab.serving.app import ServerConfig
from seqlab.serving.credentials import PairingStore

EXT = "chrome-extension://abcdefghijklmnopabcdefghijklmnop"
BODY = {"prefix": "Hi Dana,\n\nCould you send me the report", "subject": "Report"}


@pytest.fixture(scope="module")
def server(word_run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ServerConfig]]:
    folder = tmp_path_factory.mktemp("access")
    config = ServerConfig(word_run_dir, min_confidence=0.0, log_dir=folder / "log",
                          pairing_file=folder / "config" / "paired.json")
    with running_server(config) as url:
        yield url, config


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
    url, config = server
    with httpx.Client(base_url=url, timeout=30) as client:
        # pairing needs the launch token and an extension's origin
        assert client.post("/v1/pair", json={"name": "x"}, headers={"origin": EXT}).status_code == 401
        assert client.post("/v1/pair", json={"name": "x"}, headers=auth(config)).status_code == 403  # no Origin
        own = {"origin": f"http://127.0.0.1:{config.port}", **auth(config)}
        assert client.post("/v1/pair", json={"name": "x"}, headers=own).status_code == 403  # the page is no extension
        pre = client.options("/v1/pair", headers={"origin": EXT, "access-control-request-method": "POST",
                                                  "access-control-request-headers": "authorization, content-type"})
        assert pre.status_code == 204 and pre.headers["access-control-allow-origin"] == EXT
        paired = client.post("/v1/pair", json={"name": "Chromium"}, headers={"origin": EXT, **auth(config)})
        assert paired.status_code == 200, paired.text
        key = paired.json()["key"]
        assert paired.json()["origin"] == EXT and len(key) >= 43 and key != config.token
        assert paired.headers["access-control-allow-origin"] == EXT and paired.headers["vary"] == "origin"
        file = config.pairing_file
        assert file is not None and stat.S_IMODE(file.stat().st_mode) == 0o600
        assert key not in file.read_text() and EXT in file.read_text()  # only the key's digest is kept
        as_ext = {"origin": EXT, "authorization": f"Bearer {key}"}
        done = client.post("/v1/complete", json=BODY, headers=as_ext)
        assert done.status_code == 200 and done.headers["access-control-allow-origin"] == EXT
        assert client.get("/health", headers=as_ext).json()["model"]["params"] > 0
        # the key is good only from its own extension
        other = "chrome-extension://ponmlkjihgfedcbaponmlkjihgfedcba"
        assert client.post("/v1/complete", json=BODY, headers={**as_ext, "origin": other}).status_code == 403
        assert client.post("/v1/complete", json=BODY,
                           headers={**as_ext, "origin": f"http://127.0.0.1:{config.port}"}).status_code == 401
        # sessions are kept per caller: the extension's session name means nothing to the page
        sid = done.json()["session"]
        again = client.post("/v1/complete", json={**BODY, "session": sid}, headers={**auth(config)}).json()
        assert again["session"] != sid
        # an extension cannot pair others, and unpairing ends its key at once
        assert client.post("/v1/pair", json={"name": "y"}, headers=as_ext).status_code == 403
        # a pairing removed behind the server's back (another server, an edited file) ends at once
        saved = file.read_text()
        file.write_text('{"paired": []}')
        assert client.get("/health", headers=as_ext).status_code == 403  # its origin is no longer paired
        assert client.get("/health", headers={"authorization": f"Bearer {key}"}).status_code == 401
        file.write_text(saved)
        assert client.get("/health", headers=as_ext).json()["model"]["params"] > 0
        assert client.delete("/v1/pair", headers=as_ext).json() == {"ok": True}
        assert client.post("/v1/complete", json=BODY, headers=as_ext).status_code == 403  # origin no longer paired
        assert client.post("/v1/complete", json=BODY,
                           headers={"authorization": f"Bearer {key}"}).status_code == 401
    assert PairingStore(file).entries() == []


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
