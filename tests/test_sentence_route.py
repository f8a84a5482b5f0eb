"""Longer suggestions through the API: `POST /v1/complete` with `sentence` (what the compose page and the
extension ask for) answers the suggestion asked without it for as many words, cut at its first sentence
end: up to MAX_SENTENCE_WORDS words, never past a sentence's end; more words than that cap are refused."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serving_helpers import ready_client

from seqlab.generation.complete import MAX_SENTENCE_WORDS
from seqlab.serving.app import ServerConfig

BODIES = ["Hi Dana,\n\nCould you send me the rep", "Thanks for the update. I will", "See you on", "Hi"]


@pytest.fixture()
def client(word_run_dir: Path, tmp_path: Path) -> Iterator[TestClient]:
    with ready_client(ServerConfig(word_run_dir, min_confidence=0.0, log_dir=tmp_path / "log")) as c:
        yield c


def test_a_sentence_suggestion_is_the_long_one_cut_at_its_sentence_end(client: TestClient) -> None:
    for body in BODIES:
        ask = {"prefix": body, "subject": "Report", "max_words": MAX_SENTENCE_WORDS}
        got = client.post("/v1/complete", json={**ask, "sentence": True}).json()["text"]
        full = client.post("/v1/complete", json=ask).json()["text"]
        # greedy decoding gives one sequence either way: the sentence's stops only where the other goes on
        assert full.startswith(got.rstrip()), (got, full)
        assert got.rstrip() == full.rstrip() or got.rstrip()[-1] in ".!?", (got, full)
        assert len(got.split()) <= MAX_SENTENCE_WORDS
        assert not re.search(r"[.!?]\s+\S", got.rstrip())  # nothing after a sentence's end


def test_max_words_is_capped_at_a_sentence(client: TestClient) -> None:
    over = client.post("/v1/complete", json={"prefix": "Hi", "max_words": MAX_SENTENCE_WORDS + 1})
    assert over.status_code == 422 and over.json()["field"] == "max_words"
    assert client.post("/v1/complete", json={"prefix": "Hi", "max_words": MAX_SENTENCE_WORDS}).status_code == 200


def test_the_route_hands_sentence_to_the_engine(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = client.app.state.s.engine
    real, seen = engine.complete, []

    def noting(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append((kwargs["sentence"], kwargs["max_words"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "complete", noting)
    client.post("/v1/complete", json={"prefix": "Hi", "max_words": MAX_SENTENCE_WORDS, "sentence": True})
    client.post("/v1/complete", json={"prefix": "Hi"})
    assert seen == [(True, MAX_SENTENCE_WORDS), (False, 3)]  # a script that asks nothing new gets what it got
