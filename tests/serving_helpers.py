"""A seqlab server for tests: in-process through TestClient, or real on a loopback port in a thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from fastapi.testclient import TestClient

from seqlab.serving.app import ServerConfig, create_app


@contextmanager
def running_server(config: ServerConfig, timeout: float = 60.0,
                   wrap: Callable[[Any], Any] | None = None) -> Iterator[str]:
    """Serve `config` with uvicorn on 127.0.0.1 (a free port) until the block ends; yields the base URL
    once /health answers 200. `wrap` takes the app and returns the ASGI app to serve (a recorder, say)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP_NODELAY (cli/serving.py)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    app = create_app(config)
    server = uvicorn.Server(uvicorn.Config(wrap(app) if wrap else app, log_level="warning"))
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
def ready_client(config: ServerConfig) -> Iterator[TestClient]:
    """A TestClient of the app (lifespan running) once /health answers 200."""
    with TestClient(create_app(config)) as client:
        wait_ready(client)
        yield client


def wait_ready(client: TestClient, seconds: float = 60.0) -> None:
    """Poll /health until the run has loaded (AssertionError with its last answer after `seconds`)."""
    deadline = time.monotonic() + seconds
    while client.get("/health").status_code != 200:
        if time.monotonic() > deadline:
            raise AssertionError(f"the server did not load: {client.get('/health').json()}")
        time.sleep(0.01)
