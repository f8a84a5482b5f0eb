"""Inserted against typed-through characters: the server counts only what the page inserted (Tab,
Ctrl+Right) as `accepted_chars`, and what the writer typed by hand through a ghost as `typed_through_chars`,
live, in the event log and in a replay of that log alike (the browser side: tests/test_browser.py and
tests/test_extension.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serving_helpers import ready_client

from seqlab.serving.app import ServerConfig
from seqlab.serving.events import LOG_NAME, EventLog, ServingStats, replay

BODY = "Hi Dana,\n\nCould you send me the report before Friday? I would like to read it"


@pytest.fixture()
def client(word_run_dir: Path, tmp_path: Path) -> Iterator[TestClient]:
    with ready_client(ServerConfig(word_run_dir, min_confidence=0.0, log_dir=tmp_path / "log")) as c:
        yield c


def test_the_two_counts_are_kept_apart_live_and_in_the_replayed_log(tmp_path: Path) -> None:
    events = [("a", "shown", 0, 0), ("a", "accepted", 9, 4), ("b", "shown", 0, 0), ("b", "dismissed", 0, 6),
              ("c", "dismissed", 3, 0)]
    live = ServingStats()
    with EventLog(tmp_path) as log:
        for cid, kind, inserted, typed in events:
            log.record_event(cid, kind, inserted, typed)
            live.record_event(kind, inserted, typed)
    replayed, skipped = replay(tmp_path / LOG_NAME)
    keys = ("displayed", "accepted", "dismissed", "accepted_chars", "typed_through_chars")
    want = {"displayed": 2, "accepted": 1, "dismissed": 2, "accepted_chars": 12, "typed_through_chars": 10}
    assert skipped == 0
    assert {k: live.snapshot()[k] for k in keys} == want == {k: replayed.snapshot()[k] for k in keys}


def test_a_log_written_before_the_split_replays_with_no_typed_through(tmp_path: Path) -> None:
    (tmp_path / LOG_NAME).write_text(json.dumps({"id": "a", "kind": "accepted", "accepted_chars": 5}) + "\n")
    stats, skipped = replay(tmp_path / LOG_NAME)
    snap = stats.snapshot()
    assert (skipped, snap["accepted_chars"], snap["typed_through_chars"]) == (0, 5, 0)


def test_a_negative_typed_through_count_is_refused(tmp_path: Path) -> None:
    with EventLog(tmp_path) as log, pytest.raises(ValueError, match="typed_through_chars"):
        log.record_event("a", "dismissed", 0, -1)
    with pytest.raises(ValueError, match="typed_through_chars"):
        ServingStats().record_event("dismissed", 0, -2)


def test_the_api_takes_and_reports_typed_through(client: TestClient, tmp_path: Path) -> None:
    shown = client.post("/v1/complete", json={"prefix": BODY}).json()
    ok = client.post("/v1/events", json={"id": shown["id"], "kind": "accepted", "accepted_chars": 7,
                                          "typed_through_chars": 2})
    assert ok.json() == {"ok": True}
    bad = client.post("/v1/events", json={"id": shown["id"], "kind": "dismissed", "typed_through_chars": -1})
    assert bad.status_code == 422
    stats = client.get("/v1/stats").json()
    assert (stats["accepted_chars"], stats["typed_through_chars"]) == (7, 2)
    line = json.loads((tmp_path / "log" / LOG_NAME).read_text().splitlines()[-1])
    assert (line["kind"], line["accepted_chars"], line["typed_through_chars"]) == ("accepted", 7, 2)
