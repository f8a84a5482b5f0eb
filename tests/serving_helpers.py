"""A seqlab server for tests: in-process through TestClient, or real on a loopback port in a thread; and the
headless Chromium that the browser tests (test_browser.py, test_extension.py) drive against it.

Both speak as the person: requests carry the config's token and are addressed to its host and port, as the
compose page's are (`seqlab.serving.access`). Tests of the gate itself send their own headers.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from seqlab.serving.app import ServerConfig, create_app
from seqlab.serving.connections import ConnectionLimits, uvicorn_server


def auth(config: ServerConfig) -> dict[str, str]:
    """The header that proves a request comes from the person."""
    return {"Authorization": f"Bearer {config.token}"}


@contextmanager
def running_server(config: ServerConfig, timeout: float = 60.0, wrap: Callable[[Any], Any] | None = None,
                   limits: ConnectionLimits | None = None, port: int = 0) -> Iterator[str]:
    """Serve `config` with uvicorn on 127.0.0.1:`port` (0: a free one; `config.port` is set to it) until the block
    ends; yields the base URL once /health answers 200. Send `auth(config)` with /v1/ calls. `wrap` takes
    the app and returns the ASGI app to serve (a recorder, say). The server is `seqlab serve`'s
    (`connections.uvicorn_server`: its settings, its flood guards), under `limits` if given."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP_NODELAY (serving/lifecycle.py)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    config.host, config.port = "127.0.0.1", sock.getsockname()[1]
    url = f"http://127.0.0.1:{config.port}"
    app = create_app(config)
    server = uvicorn_server(wrap(app) if wrap else app, limits)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"the server at {url} did not become healthy in {timeout} s")
            time.sleep(0.02)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextmanager
def gate_server(run_dir: Path, folder: Path) -> Iterator[tuple[str, ServerConfig]]:
    """A real server of `run_dir` on loopback that always suggests, its log and pairings under `folder`: what the
    tests of the gate attack; yields its URL and config."""
    config = ServerConfig(run_dir, min_confidence=0.0, log_dir=folder / "log",
                          pairing_file=folder / "config" / "paired.json")
    with running_server(config) as url:
        yield url, config


def person_client(config: ServerConfig) -> TestClient:
    """A TestClient addressed to the config's host and port, carrying its token (enter it to start the app)."""
    return TestClient(create_app(config), base_url=f"http://{config.host}:{config.port}", headers=auth(config))


@contextmanager
def ready_client(config: ServerConfig) -> Iterator[TestClient]:
    """A TestClient of the app (lifespan running), speaking as the person, once /health answers 200."""
    with person_client(config) as client:
        wait_ready(client)
        yield client


def wait_ready(client: TestClient, seconds: float = 60.0) -> None:
    """Poll /health until the run has loaded (AssertionError with its last answer after `seconds`)."""
    deadline = time.monotonic() + seconds
    while client.get("/health").status_code != 200:
        if time.monotonic() > deadline:
            raise AssertionError(f"the server did not load: {client.get('/health').json()}")
        time.sleep(0.01)


@dataclass
class Served:
    """A `seqlab serve` child process: its base URL, its token (from server.json, as the person's scripts read
    it), and `page`, the newest compose link it printed (each works once; the server prints the next)."""

    url: str
    token: str
    proc: subprocess.Popen[str]
    log: Path

    @property
    def page(self) -> str:
        return PRINTED_URL.findall(self.log.read_text())[-1][0]

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def get(self, path: str) -> Any:
        """GET path as the person; the JSON answer."""
        return httpx.get(f"{self.url}{path}", headers=self.headers(), timeout=10).json()


PRINTED_URL = re.compile(r"((http://127\.0\.0\.1:(\d+))/\?(?:code|token)=[A-Za-z0-9_-]+)")


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


@contextmanager
def served(run_dir: Path, log_dir: Path, *args: str, timeout: float = 60.0) -> Iterator[Served]:
    """`python -m seqlab serve RUN_DIR --port 0 ARGS` as a child, as a person starts it: the URL is read
    from what it prints (the newest link: `Served.page`), the token from server.json. Yields once /health
    answers 200; stops it after the block."""
    log = log_dir.parent / f"{log_dir.name}-output.log"  # beside: the server makes log_dir itself, 0700
    cmd = [sys.executable, "-m", "seqlab", "serve", str(run_dir), "--port", "0", "--log", str(log_dir), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, text=True)
    try:
        deadline = time.monotonic() + timeout
        found = None
        while not (found and _healthy(found.group(2))):
            found = found or PRINTED_URL.search(log.read_text())
            if proc.poll() is not None:
                raise AssertionError(f"seqlab serve exited with {proc.returncode}:\n{log.read_text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"seqlab serve not healthy after {timeout} s:\n{log.read_text()}")
            time.sleep(0.1)
        token = json.loads((run_dir / "serve" / "server.json").read_text())["token"]
        yield Served(found.group(2), token, proc, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ----------------------------------------------------------------------------- the browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def require_browser() -> None:
    """Skip without Debian's chromium and chromedriver, or fail when SEQLAB_REQUIRE_BROWSER=1 (set by CI)."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    if missing:
        reason = f"{' and '.join(missing)} not found (Debian's chromium and chromium-driver; .ci/run installs them)"
        if os.environ.get("SEQLAB_REQUIRE_BROWSER") == "1":
            pytest.fail(f"SEQLAB_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
        pytest.skip(reason)


def chromium(user_data_dir: Path, *args: str, capabilities: dict[str, Any] | None = None) -> Any:
    """Headless Chromium (a selenium driver) with a fresh profile in `user_data_dir`, a 1000x700 window at
    scale 1, nothing of its own on the network, `args` added (--load-extension=..., say) and `capabilities`
    set (goog:loggingPrefs, say)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    # Selenium Manager would look for (and download) a browser; the explicit driver path skips it, and
    # SE_OFFLINE tells it to stay off the network should anything still call it.
    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--window-size=1000,700", "--force-device-scale-factor=1", f"--user-data-dir={user_data_dir}",
                *args):
        options.add_argument(arg)
    for name, value in (capabilities or {}).items():
        options.set_capability(name, value)
    return webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def static_site(folder: Path) -> Iterator[str]:
    """Serve `folder`'s files over HTTP on a free loopback port: a site of another origin than the server's
    (fixture pages, a hostile page); yields its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
