"""The replay benchmark (seqlab/bench/replay.py): a person's mail typed and sent in date order, learning on
against learning off, on a tiny model and synthetic mail."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from preparing import prepare

from seqlab.bench import replay
from seqlab.runs.load import load_run
from seqlab.serving.learner import LearnSettings

PERSON = "david.cohen@keystone-legal.example"


@pytest.fixture(scope="module")
def person(word_run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("replay") / "david"
    prepare("synthetic", out, count=400, seed=0, senders=[PERSON], tokenizer_from=word_run_dir, progress=False,
            workers=1)
    return out


def test_emails_come_in_date_order_from_every_split(person: Path, word_run_dir: Path) -> None:
    _, tok, _ = load_run(word_run_dir, "cpu")
    emails = replay.person_emails(person, tok)
    meta = json.loads((person / "meta.json").read_text())
    assert len(emails) == meta["kept"] and meta["split_by"] == "date"
    # the date split holds the latest mail out: replayed in date order, the test split's emails come last
    test = replay.person_emails(person, tok, ["test"])
    assert emails[-len(test):] == test


def test_learning_off_and_on_agree_when_nothing_is_learned(person: Path, word_run_dir: Path) -> None:
    """With a learning rate of 0 the learner's steps change nothing: both replays type the same proposals,
    every figure is equal and every paired interval is [0, 0]. With the default rate the later emails are
    typed with other weights."""
    model, tok, _ = load_run(word_run_dir, "cpu")
    emails = replay.person_emails(person, tok, limit=4)
    still = replace(LearnSettings(), lr=0.0)
    off, on = replay.replay(model, tok, emails, words=8, settings=still)
    assert [[(b.offset, b.text) for b in e.boundaries] for e in off] == \
        [[(b.offset, b.text) for b in e.boundaries] for e in on]
    a, b = replay.email_counts(off, "first-word", 0.0), replay.email_counts(on, "first-word", 0.0)
    assert replay.figures(a) == replay.figures(b)
    assert all(ci in (None, [0.0, 0.0]) for ci in replay.paired_intervals(a, b, resamples=50).values())
    _, learned = replay.replay(model, tok, emails, words=8)
    assert [b.word_confidences for b in learned[0].boundaries] == [b.word_confidences for b in off[0].boundaries]
    assert any([b.word_confidences for b in x.boundaries] != [b.word_confidences for b in y.boundaries]
               for x, y in zip(learned[1:], off[1:]))  # the first email is typed before anything was learned


def test_the_command_writes_the_table(person: Path, word_run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "replay.json"
    assert replay.main([str(word_run_dir), str(person), "--out", str(out), "--words", "6", "--emails", "3"]) == 0
    result = json.loads(out.read_text())
    assert result["pooled"]["emails"] == 3 and set(result["pooled"]["off"]) == set(replay.FIGURES)
    assert "| david |" in out.with_suffix(".md").read_text()


def test_suggestions_learning_made_right_are_right_only_with_learning(person: Path, word_run_dir: Path) -> None:
    model, tok, _ = load_run(word_run_dir, "cpu")
    emails = replay.person_emails(person, tok, limit=6)
    off, on = replay.replay(model, tok, emails, words=12)
    for e in replay.learned_right(off, on, "first-word", 0.0, count=50):
        assert len(e["on"].split()) >= 2 and e["on"] != e["off"]
    # nothing was learned when learning is off on both sides
    assert replay.learned_right(off, off, "first-word", 0.0) == []
