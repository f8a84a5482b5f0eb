"""The compose page's one-time login codes (`seqlab.serving.login_codes`) on a real server on loopback: a code
is traded once, only from the page's own origin, for a credential that counts as the person; pairing the
extension may spend a code too; both tables stay bounded. The page's side is in test_browser.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serving_helpers import gate_server, person_client
from signing_client import pair

from seqlab.serving.app import ServerConfig
from seqlab.serving.login_codes import MAX_CODES, MAX_CREDENTIALS, LoginCodes

EXTENSION = "chrome-extension://abcdefghijklmnopabcdefghijklmnop"


@pytest.fixture(scope="module")
def server(word_run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ServerConfig]]:
    with gate_server(word_run_dir, tmp_path_factory.mktemp("login")) as served:
        yield served


def _login(url: str, code: str, origin: str | None = "") -> httpx.Response:
    headers = {} if origin is None else {"Origin": origin or url}
    return httpx.post(f"{url}/login", json={"code": code}, headers=headers, timeout=10)


def _stats(url: str, secret: str) -> int:
    return httpx.get(f"{url}/v1/stats", headers={"Authorization": f"Bearer {secret}"}, timeout=10).status_code


def test_a_code_is_traded_once_from_the_page_origin_for_a_credential(server: tuple[str, ServerConfig]) -> None:
    url, config = server
    fresh: list[str] = []
    config.login.listen(fresh.append)
    code = config.login.issue()
    assert _stats(url, code) == 401  # a code is no credential by itself
    assert _login(url, code, origin=None).status_code == 403  # no Origin: not the compose page
    assert _login(url, code, origin="http://127.0.0.1:1").status_code == 403  # another page: the gate
    first = _login(url, code)
    assert first.status_code == 200 and fresh  # spent, and the listener (the CLI) got the next code
    credential = first.json()["credential"]
    assert credential != config.token and _stats(url, credential) == 200
    assert _login(url, code).status_code == 401  # the history's copy of the link is worth nothing
    assert _login(url, fresh[-1]).status_code == 200  # the next link works
    assert _login(url, "x" * 43).status_code == 401


def test_pairing_the_extension_spends_a_code(server: tuple[str, ServerConfig]) -> None:
    url, config = server
    code = config.login.issue()
    paired = pair(url, code, EXTENSION)
    assert paired.id
    assert _login(url, code).status_code == 401  # spent by the pairing
    with pytest.raises(httpx.HTTPStatusError):
        pair(url, code, EXTENSION)  # and no second pairing from it


def test_under_allow_remote_login_needs_the_token(word_run_dir: Path, tmp_path: Path) -> None:
    config = ServerConfig(word_run_dir, min_confidence=0.0, log_dir=tmp_path / "log", allow_remote=True,
                          pairing_file=tmp_path / "config" / "paired.json")
    with person_client(config) as client:
        del client.headers["authorization"]
        code = config.login.issue()
        r = client.post("/login", json={"code": code}, headers={"origin": str(client.base_url).rstrip("/")})
        assert r.status_code == 401 and config.login.take(code)  # refused before the route: still outstanding


def test_codes_and_credentials_are_bounded() -> None:
    login = LoginCodes()
    oldest = login.issue()
    codes = [login.issue() for _ in range(MAX_CODES)]
    assert not login.take(oldest) and login.take(codes[-1]) and not login.take(codes[-1])
    first = login.login(codes[0])
    assert first is not None and login.is_credential(first)
    for code in codes[1:-1]:
        assert login.login(code) is not None
    more = [login.login(login.issue()) for _ in range(MAX_CREDENTIALS)]
    assert not login.is_credential(first) and all(c is not None and login.is_credential(c) for c in more)
