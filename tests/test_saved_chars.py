"""Saved characters: the typing replay against hand counts and against typing live through `complete`,
the intervals, the best threshold under a cap, `calibrate --target saved` and `seqlab tradeoff`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqlab.cli.main import main
from seqlab.data.store import TokenStore
from seqlab.evaluation.calibration import calibrate_run, load_calibration
from seqlab.evaluation.saved_chars import (
    Boundary,
    TypedEmail,
    accepted_chars,
    best_threshold,
    boundaries,
    score_typing,
    simulate,
    type_emails,
    typed_span,
)
from seqlab.evaluation.scored_emails import completion_texts
from seqlab.generation.complete import complete
from seqlab.generation.gate import word_ends
from seqlab.runs.load import load_run

TEXT = "Hi\n\nsee you at the game, bye now"


def test_accepted_chars_takes_the_longest_literal_prefix_at_a_word_end() -> None:
    assert accepted_chars("see you there", "see you at") == len("see you")
    assert accepted_chars("file", "files, please") == 4  # the writer takes it and types "s,"
    assert accepted_chars("seen", "see you") == 0
    assert accepted_chars("see  you", "see you") == 3  # spacing counts: the page inserts the text literally


def test_typed_span_and_boundaries() -> None:
    start, end = typed_span(TEXT, 3)
    assert TEXT[start:end] == "see you at"
    assert [TEXT[i:].split(" ")[0] for i in boundaries(TEXT, start, end)] == ["you", "at"]
    start, end = typed_span(TEXT, 100)
    assert end == len(TEXT)
    # one letter into each word that goes on: "s|ee", "y|ou", "a|t", "t|he", "g|ame,", "b|ye", "n|ow"
    mid = boundaries(TEXT, start, end, mid_word=1)
    assert [TEXT[i - 1:i + 1] for i in mid if i not in boundaries(TEXT, start, end)] == [
        "se", "yo", "at", "th", "ga", "by", "no"]
    assert mid == sorted(mid)


def _email() -> TypedEmail:
    start, end = typed_span(TEXT, 100)
    at = {TEXT[i:].split(" ", 1)[0]: i for i in boundaries(TEXT, start, end)}
    return TypedEmail(TEXT, start, end, [
        Boundary(at["you"], "you at the", [0.9, 0.5, 0.1]),  # right: accepted whole, skips "at" and "the"
        Boundary(at["at"], "at", [0.9]),  # never asked: inside the accepted text
        Boundary(at["game,"], "match", [0.6]),  # wrong
        Boundary(at["bye"], ".", [0.95]),  # lone punctuation: shown only by first-word, and wrong
        Boundary(at["now"], "now", [0.3]),  # right, three characters
    ])


def test_simulate_matches_a_hand_count() -> None:
    e = _email()
    first = simulate(e, "first-word", 0.0)
    # shown at "you", "game,", "bye", "now" (not "at": accepted); saved (10 - 1) + (3 - 1)
    assert (first.shown, first.wrong, first.accepted, first.saved) == (4, 2, 2, 9 + 2)
    assert first.chars == len(TEXT) - len("Hi\n\n") and first.words == 7
    ec = simulate(e, "expected-chars", 0.0)
    # no lone "."; "you at the" is worth max(0.9 * 2, 0.5 * 5, 0.1 * 9) = 2.5 at two words: "you at" is
    # shown, saving 5, and "now" 2
    assert (ec.shown, ec.wrong, ec.saved) == (3, 1, 5 + 2)
    sure = simulate(e, "expected-chars", 2.45)  # "match" is worth 0.6 * 4 = 2.4, "now" 0.3 * 2
    assert (sure.shown, sure.wrong, sure.saved) == (1, 0, len("you at") - 1)
    row = score_typing([e], "first-word", 0.0)
    assert row["saved"] == pytest.approx(11 / first.chars)
    assert row["wrong_per_100_words"] == pytest.approx(100 * 2 / 7)


def test_bootstrap_intervals_hold_the_estimate_and_repeat_with_the_seed() -> None:
    emails = [_email(), TypedEmail("S\n\na b c", 3, 8, [])] * 3
    a, b = score_typing(emails, "first-word", 0.0, seed=1), score_typing(emails, "first-word", 0.0, seed=1)
    assert a == b
    lo, hi = a["saved_ci95"]
    assert lo <= a["saved"] <= hi and lo < hi


def test_best_threshold_keeps_to_the_cap() -> None:
    emails = [_email()] * 4
    free = best_threshold(emails, "first-word", 100.0)
    capped = best_threshold(emails, "first-word", 0.0)
    assert free["saved"] >= capped["saved"]
    assert capped["wrong_per_100_words"] == 0.0 and capped["within_cap"]
    assert free["wrong_per_100_words"] <= 100.0


def _live(model, tok, text: str, words: int, rule: str, threshold: float, mid_word: int = 0
          ) -> tuple[int, int, int]:
    """Type `text` calling `complete` with the rule at every boundary reached: (saved, shown, wrong)."""
    start, end = typed_span(text, words)
    at, saved, shown, wrong = start, 0, 0, 0
    for i in boundaries(text, start, end, mid_word):
        if i < at:
            continue
        c = complete(model, tok, text[:i], max_words=3, rule=rule, threshold=threshold)
        if not c.text:
            continue
        shown += 1
        took = 0
        for stop in word_ends(c.text):
            if not text[i:end].startswith(c.text[:stop]):
                break
            took = stop
        if took == 0:
            wrong += 1
        elif took > 1:
            saved, at = saved + took - 1, i + took
    return saved, shown, wrong


@pytest.mark.parametrize(("rule", "threshold", "mid_word"), [
    ("first-word", 0.0, 0), ("first-word", 0.2, 0), ("expected-chars", 0.0, 0), ("expected-chars", 0.3, 0),
    ("expected-chars", 0.3, 1)])
def test_the_replay_equals_typing_live_through_complete(gru_run_dir: Path, tiny_data_dir: Path, rule: str,
                                                        threshold: float, mid_word: int) -> None:
    model, tok, _ = load_run(gru_run_dir, "cpu")
    texts = completion_texts(TokenStore(tiny_data_dir, "val"), tok, 3, 0)
    typed = type_emails(model, tok, texts, words=12, mid_word=mid_word)
    for text, e in zip(texts, typed):
        t = simulate(e, rule, threshold)
        assert (t.saved, t.shown, t.wrong) == _live(model, tok, text, 12, rule, threshold, mid_word)


def test_calibrate_for_saved_characters_is_what_the_server_reads(gru_run_dir: Path, tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(gru_run_dir, run)
    got = calibrate_run(run, split="val", emails=4, target="saved", rule="expected-chars", max_wrong_per_100=20.0,
                        words=10)
    kept = load_calibration(run)
    assert kept is not None and kept["rule"] == "expected-chars" and kept["threshold"] == got["threshold"]
    assert got["wrong_per_100_words"] <= 20.0 or not got["within_cap"]
    from seqlab.serving.app import ServerConfig, load_engine

    engine, info = load_engine(ServerConfig(run_dir=run))
    assert (engine.rule, engine.threshold) == ("expected-chars", got["threshold"])
    (run / "calibration.json").write_text(json.dumps({"threshold": 3.0}))  # no rule: a first word's probability
    with pytest.raises(Exception, match="between 0 and 1"):
        load_calibration(run)


def test_tradeoff_command_writes_the_curve(gru_run_dir: Path, tmp_path: Path, capsys) -> None:
    assert main(["tradeoff", str(gru_run_dir), "--out", str(tmp_path / "t"), "--split", "val", "--emails", "3",
                 "--words", "8"]) == 0
    out = capsys.readouterr().out
    assert "| first-word |" in out and "| expected-chars |" in out
    result = json.loads((tmp_path / "t" / "tradeoff.json").read_text())
    assert {r["rule"] for r in result["curve"]} == {"first-word", "expected-chars"}
    assert (tmp_path / "t" / "tradeoff.png").stat().st_size > 1000
    assert main(["eval", str(gru_run_dir), "--saved-threshold", "2", "--rule", "first-word",
                 "--completion-emails", "2"]) == 2
