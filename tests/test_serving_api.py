"""The server's HTTP API through FastAPI's TestClient: answers, sessions, limits, events and stats."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serving_helpers import person_client, ready_client, wait_ready

from seqlab.serving import app as app_module
from seqlab.serving.app import ServerConfig
from seqlab.serving.routes import CompleteResponse

BODY = "Hi Dana,\n\nCould you send me the report before Friday? I would like to read it"


@pytest.fixture()
def client(word_run_dir: Path, tmp_path: Path) -> Iterator[TestClient]:
    with ready_client(ServerConfig(word_run_dir, min_confidence=0.0, log_dir=tmp_path / "log", max_sessions=4)) as c:
        yield c


def test_health_is_503_while_loading_then_describes_the_model(tiny_run_dir: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    real = app_module.load_engine

    def slow(config: ServerConfig):  # type: ignore[no-untyped-def]
        release.wait(10)
        return real(config)

    monkeypatch.setattr(app_module, "load_engine", slow)
    with person_client(ServerConfig(tiny_run_dir, log_dir=tmp_path)) as c:
        loading = c.get("/health")
        assert loading.status_code == 503 and loading.json()["status"] == "loading"
        assert "Retry-After" in loading.headers
        early = c.post("/v1/complete", json={"prefix": "Hi"})
        assert early.status_code == 503 and "loading" in early.json()["error"]
        release.set()
        wait_ready(c)
        model = c.get("/health").json()["model"]
        assert model["mixer"] == "attention" and model["context_limit"] == 32 and model["params"] > 0
        assert model["threshold_source"].startswith("none")


def test_complete_answers_and_a_session_reuses_its_state(client: TestClient) -> None:
    fresh = client.post("/v1/complete", json={"prefix": BODY, "subject": "Report"}).json()
    assert set(fresh) == {"id", "text", "confidence", "words", "latency_ms", "cut_chars", "threshold", "source",
                          "session"}
    CompleteResponse.model_validate(fresh, strict=True)  # the route answers what its schema documents
    assert fresh["threshold"] == 0.0 and 0.0 <= fresh["confidence"] <= 1.0 and len(fresh["session"]) >= 22
    assert fresh["words"] == len(fresh["text"].split()) and 1 <= fresh["words"] <= 3
    session = None
    for n in range(len(BODY) - 6, len(BODY) + 1):  # the last keystrokes of one writer
        kept = client.post("/v1/complete", json={"prefix": BODY[:n], "subject": "Report", "session": session}).json()
        assert session in (None, kept["session"])  # the server named the session once; it keeps its name
        session = kept["session"]
    assert client.get("/v1/stats").json()["reused_tokens"] > 0  # reuse is the server's own figure now
    assert (kept["text"], kept["words"], kept["cut_chars"]) == (fresh["text"], fresh["words"], fresh["cut_chars"])
    assert kept["confidence"] == pytest.approx(fresh["confidence"], rel=1e-4)


def test_sessions_are_named_by_the_server(client: TestClient) -> None:
    """A session name the server did not issue starts a new session: a prober cannot pick a writer's name."""
    first = client.post("/v1/complete", json={"prefix": BODY, "session": "w1"}).json()
    assert first["session"] != "w1"
    again = client.post("/v1/complete", json={"prefix": BODY + " a", "session": first["session"]}).json()
    assert again["session"] == first["session"]
    assert client.post("/v1/complete", json={"prefix": BODY, "session": "w1"}).json()["session"] != "w1"


def test_a_prefix_longer_than_the_window_is_cut_and_the_answer_says_so(client: TestClient) -> None:
    short = client.post("/v1/complete", json={"prefix": "Hi", "subject": ""}).json()
    long = client.post("/v1/complete", json={"prefix": BODY * 3, "subject": "Report"}).json()
    assert short["cut_chars"] == 0
    # the tiny attention model sees at most 32 tokens (bytes): all but the last 16 to 32 are cut
    assert len("Report\n\n" + BODY * 3) - 32 <= long["cut_chars"] <= len("Report\n\n" + BODY * 3) - 16


def test_threshold_withholds_unsure_suggestions(client: TestClient) -> None:
    r = client.post("/v1/complete", json={"prefix": BODY, "min_confidence": 1.0}).json()
    assert r["text"] == "" and r["words"] == 0 and r["threshold"] == 1.0


@pytest.mark.parametrize("body,field", [
    ({"prefix": "x", "max_words": 13}, "max_words"),  # over MAX_SENTENCE_WORDS
    ({"prefix": "x", "max_words": 0}, "max_words"),
    ({"prefix": "x", "min_confidence": 1.5}, "min_confidence"),
    ({"prefix": "x", "beam": 0}, "beam"),
    ({"prefix": 3}, "prefix"),
    ({"subject": "no prefix"}, "prefix"),
    ({"prefix": "x", "session": ""}, "session"),
    ({"prefix": "x", "surprise": 1}, "surprise"),
])
def test_bad_fields_are_422_naming_the_field(client: TestClient, body: dict, field: str) -> None:
    r = client.post("/v1/complete", json=body)
    assert r.status_code == 422 and r.json()["field"] == field and field in r.json()["error"]


def test_malformed_json_and_oversized_bodies(client: TestClient) -> None:
    r = client.post("/v1/complete", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and "error" in r.json()
    big = json.dumps({"prefix": "a" * 70_000}).encode()
    r = client.post("/v1/complete", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "65536" in r.json()["error"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"prefix": "'
        for _ in range(70):
            yield b"a" * 1024
        yield b'"}'

    r = client.post("/v1/complete", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_events_are_logged_and_counted(client: TestClient, tmp_path: Path) -> None:
    shown = client.post("/v1/complete", json={"prefix": BODY}).json()
    assert client.post("/v1/events", json={"id": shown["id"], "kind": "shown"}).json() == {"ok": True}
    client.post("/v1/events", json={"id": shown["id"], "kind": "accepted", "accepted_chars": 7})
    assert client.post("/v1/events", json={"id": shown["id"], "kind": "clicked"}).status_code == 422
    made_up = client.post("/v1/events", json={"id": "c" * 32, "kind": "accepted", "accepted_chars": 9})
    assert made_up.status_code == 422 and made_up.json()["field"] == "id"  # only ids the server gave out
    log = tmp_path / "log" / "events.jsonl"
    assert log.stat().st_mode & 0o777 == 0o600 and log.parent.stat().st_mode & 0o777 == 0o700
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    kinds = [line["kind"] for line in lines]
    assert kinds.count("shown") == 1 and kinds.count("accepted") == 1 and "clicked" not in kinds
    assert all(line["id"] == shown["id"] for line in lines if line["kind"] in ("shown", "accepted"))
    stats = client.get("/v1/stats").json()
    assert stats["completions"] == 1 and stats["accepted"] == 1 and stats["accepted_chars"] == 7
    assert stats["latency_ms"]["count"] == 1 and stats["latency_ms"]["p50"] > 0


def test_sessions_are_bounded(client: TestClient) -> None:
    for i in range(10):
        client.post("/v1/complete", json={"prefix": f"Hello {i}"})
    assert client.get("/v1/stats").json()["sessions"] == 4


def test_the_compose_page_and_unknown_routes(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "access-control-allow-origin" not in page.headers
    missing = client.get("/nope")
    assert missing.status_code == 404 and "error" in missing.json()
    assert client.get("/docs").status_code == 404  # FastAPI's docs page loads its scripts from a CDN


def test_the_page_loads_nothing_from_elsewhere() -> None:
    static = Path(app_module.__file__).parent / "static"
    files = sorted(static.iterdir())
    assert {f.name for f in files} >= {"compose.html", "compose.css", "compose.js"}
    for f in files:
        text = f.read_text()
        assert "http://" not in text and "https://" not in text and "//cdn" not in text, f.name
