"""The real server on loopback under load: every request is answered (200 or 503), none hangs, and a client
that gives up before its turn costs the model nothing."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from serving_helpers import auth, running_server

from seqlab.serving.app import ServerConfig
from seqlab.serving.engine import CompletionEngine

CLIENTS = 32


def test_many_clients_with_a_small_queue(word_run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = CompletionEngine.complete

    def at_least_50ms(self: CompletionEngine, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        time.sleep(0.05)  # a model of realistic speed: the tiny one answers before the next client connects
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(CompletionEngine, "complete", at_least_50ms)
    config = ServerConfig(word_run_dir, min_confidence=0.0, max_queue=2, log_dir=tmp_path)
    with running_server(config) as url:
        start = threading.Barrier(CLIENTS)

        def client(i: int) -> httpx.Response:
            with httpx.Client(base_url=url, timeout=60, headers=auth(config)) as c:
                start.wait()  # all at once, so the queue really fills
                return c.post("/v1/complete", json={"prefix": f"Hi team, the numbers for week {i} are",
                                                    "subject": "Numbers"})

        with ThreadPoolExecutor(CLIENTS) as pool:
            responses = list(pool.map(client, range(CLIENTS)))
        codes = [r.status_code for r in responses]
        assert set(codes) <= {200, 503} and len(codes) == CLIENTS
        busy = [r for r in responses if r.status_code == 503]
        assert busy, "32 simultaneous clients against a queue of 2 should be turned away in part"
        assert all(r.headers.get("retry-after") and "waiting" in r.json()["error"] for r in busy)
        assert all("text" in r.json() for r in responses if r.status_code == 200)
        stats = httpx.get(f"{url}/v1/stats", headers=auth(config)).json()
        assert stats["rejected"] == len(busy) and stats["completions"] == CLIENTS - len(busy)
        assert stats["waiting"] == 0
        # healthy afterwards
        assert httpx.get(f"{url}/health").status_code == 200
        assert httpx.post(f"{url}/v1/complete", json={"prefix": "Thanks"}, timeout=30,
                          headers=auth(config)).status_code == 200


def test_a_client_that_leaves_before_its_turn_is_not_served(word_run_dir: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    real = CompletionEngine.complete

    def slow(self: CompletionEngine, prefix: str, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if prefix == "slow":
            time.sleep(3.0)  # holds the model thread while the others queue behind it
        return real(self, prefix, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(CompletionEngine, "complete", slow)
    config = ServerConfig(word_run_dir, min_confidence=0.0, log_dir=tmp_path)
    with running_server(config) as url:
        blocker = threading.Thread(target=lambda: httpx.post(f"{url}/v1/complete", json={"prefix": "slow"},
                                                             timeout=30, headers=auth(config)))
        blocker.start()
        time.sleep(0.2)
        for i in range(3):  # each gives up long before the slow one is done
            with pytest.raises(httpx.TimeoutException):
                httpx.post(f"{url}/v1/complete", json={"prefix": f"gone {i}"}, timeout=0.2, headers=auth(config))
        blocker.join()
        time.sleep(0.3)
        stats = httpx.get(f"{url}/v1/stats", headers=auth(config)).json()
        assert stats["completions"] == 1 and stats["waiting"] == 0
