"""The replay benchmark (seqlab/bench/replay.py, replay_passes.py): a person's mail typed and sent in date
order, the levers (memory, reply copies, learning, a per-person setting) added one at a time, on a tiny model
and synthetic mail."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from preparing import prepare

from seqlab.bench import replay
from seqlab.bench import replay_passes as passes
from seqlab.evaluation.saved_fit import fit_served
from seqlab.evaluation.typing_sim import MODEL, TypedEmail
from seqlab.generation.gate import word_ends
from seqlab.runs.load import load_run
from seqlab.serving.learner import LearnSettings
from seqlab.serving.recalibrate import GENERAL, UNFITTED_MODEL

PERSON = "david.cohen@keystone-legal.example"
ALL = ("train", "val", "test")


@pytest.fixture(scope="module")
def person(word_run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("replay") / "david"
    prepare("synthetic", out, count=400, seed=0, senders=[PERSON], tokenizer_from=word_run_dir, progress=False,
            workers=1)
    return out


def _proposals(typed: list) -> list:
    return [[(b.offset, {s: (c.text, c.word_confidences) for s, c in b.proposals.items()}) for b in e.boundaries]
            for e in typed]


def test_emails_come_in_date_order_from_every_split(person: Path, word_run_dir: Path) -> None:
    _, tok, _ = load_run(word_run_dir, "cpu")
    mail = passes.person_mail(person, tok, ALL)
    meta = json.loads((person / "meta.json").read_text())
    assert len(mail.emails) == meta["kept"] == len(mail.contexts) and meta["split_by"] == "date"
    # the date split holds the latest mail out: replayed in date order, the test split's emails come last
    test = passes.person_mail(person, tok, ["test"]).emails
    assert mail.emails[-len(test):] == test


def test_learning_changes_nothing_at_a_learning_rate_of_zero(person: Path, word_run_dir: Path) -> None:
    """With a learning rate of 0 the learner's steps change nothing: the learned pass proposes what the frozen
    pass does at every position. With the default rate the later emails are typed with other weights."""
    model, tok, _ = load_run(word_run_dir, "cpu")
    mail = passes.person_mail(person, tok, ALL, limit=4)
    kw = {"words": 8, "max_words": 6, "ask": "every-letter"}
    frozen = passes.frozen_pass(model, tok, mail, **kw)
    still = passes.learned_pass(model, tok, mail, settings=replace(LearnSettings(), lr=0.0), **kw)
    assert _proposals(frozen) == _proposals(still)
    learned = passes.learned_pass(model, tok, mail, **kw)
    assert _proposals(learned[:1]) == _proposals(frozen[:1])  # typed before anything was learned
    assert _proposals(learned[1:]) != _proposals(frozen[1:])


def test_the_memory_holds_only_the_emails_sent_before(person: Path, word_run_dir: Path) -> None:
    """An email sent twice: the first time the memory has never seen it, the second time it offers the rest
    of the email from the first, and that proposal is what followed there."""
    model, tok, _ = load_run(word_run_dir, "cpu")
    mail = passes.person_mail(person, tok, ALL, limit=3)
    twice = passes.Person("twice", [mail.emails[0], mail.emails[0]], ["", ""])
    typed = passes.add_memory(passes.frozen_pass(model, tok, twice, words=10, max_words=4, ask="every-letter"),
                              twice)
    first, again = typed
    assert not any("memory" in b.proposals for b in first.boundaries)
    from_memory = [(b.offset, b.proposals["memory"].text) for b in again.boundaries if "memory" in b.proposals]
    assert len(from_memory) > len(again.boundaries) // 2
    # each is text of the one email in the memory, and mostly what follows right there
    assert all(text in twice.emails[0] for _, text in from_memory)
    assert sum(again.text[i:].startswith(text) for i, text in from_memory) > len(from_memory) // 2


def test_limited_cuts_every_proposal_and_keeps_the_sources_asked(person: Path, word_run_dir: Path) -> None:
    model, tok, _ = load_run(word_run_dir, "cpu")
    mail = passes.person_mail(person, tok, ALL, limit=3)
    typed = passes.add_memory(passes.frozen_pass(model, tok, mail, words=10, max_words=6, ask="every-letter"),
                              mail)
    cut = passes.limited(typed, 2, [])
    for full, short in zip(typed, cut):
        for a, b in zip(full.boundaries, short.boundaries):
            assert set(b.proposals) == {MODEL}
            c, d = a.proposals[MODEL], b.proposals[MODEL]
            assert len(word_ends(d.text)) <= 2 and c.text.startswith(d.text)
            assert d.word_confidences == c.word_confidences[:len(d.word_confidences)]


def test_the_per_person_setting_is_the_unfitted_one_until_a_fit_on_earlier_mail_is_sure_to_save_more(
        person: Path, word_run_dir: Path) -> None:
    model, tok, _ = load_run(word_run_dir, "cpu")
    mail = passes.person_mail(person, tok, ALL, limit=8)
    typed = passes.add_memory(passes.frozen_pass(model, tok, mail, words=10, max_words=6, ask="every-letter"),
                              mail)
    silent = passes.limited(typed, 6, [])  # the same model without its memory: it can only save less
    typings = {"full": typed, "silent": silent}
    unfitted = ("silent", 0.5, {"memory": 0.0})
    settings = passes.online_settings(typings, "expected-chars", unfitted, 3.0, min_emails=3, every=2)
    assert settings[:3] == [unfitted] * 3 and len(settings) == len(typed)
    assert settings[3] == settings[4] and settings[5] == settings[6]  # refitted every 2 emails
    # from the 4th email on, fit_served's choice on every email before it (or the newest `window`)
    windowed = passes.online_settings(typings, "expected-chars", unfitted, 3.0, min_emails=3, every=2, window=2)
    taken = set()
    for e in (3, 5, 7):
        for got, lo in ((settings[e], 0), (windowed[e], e - 2)):
            row = fit_served({n: t[lo:e] for n, t in typings.items()}, unfitted, "expected-chars", 3.0)
            taken.add(row["fitted"])
            assert got == (row["model"], float(row["threshold"]), row["weights"])
            if row["fitted"]:  # a fitted setting keeps to the cap on the emails it was fitted on
                counts = replay.email_counts(typings[row["model"]][lo:e], "expected-chars",
                                             [(row["threshold"], row["weights"])] * (e - lo))
                assert (replay.figures(counts)["wrong_per_100_words"] or 0.0) <= 3.0 and row["gain_low"] > 0
    assert taken == {True, False}  # on this mail some fits are sure to save more and some are not


def test_the_command_writes_the_table(person: Path, word_run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "replay.json"
    kept = tmp_path / "typings.json"
    assert replay.main([str(word_run_dir), str(person), "--out", str(out), "--words", "6", "--emails", "3",
                        "--typings", str(kept)]) == 0
    result = json.loads(out.read_text())
    assert result["pooled"]["emails"] == 3 and set(result["pooled"]) >= {key for key, _ in replay.LEVERS}
    assert set(result["pooled"][replay.OFF]["figures"]) == set(replay.FIGURES)
    table = out.with_suffix(".md").read_text()
    assert "| david |" in table and "+ the person's memory" in table
    # too few emails for a fit: the unfitted model for all three
    assert result["people"][0]["served_general"] == (3 if UNFITTED_MODEL == GENERAL else 0)
    typings = json.loads(kept.read_text())["people"]["david"]
    assert set(typings) == {"learned", "general"} and all(len(t) == 3 for t in typings.values())
    assert TypedEmail.from_json(typings["general"][0]).to_json() == typings["general"][0]
