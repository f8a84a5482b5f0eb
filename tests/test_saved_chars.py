"""Saved characters: the typing replay against hand counts and against typing live through `complete` the
way compose.js asks and accepts, the positions asked, sources and their weights, the intervals, the best
threshold under a cap and the joint fit, `calibrate --target saved` and `seqlab tradeoff`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from seqlab.cli.main import main
from seqlab.data.store import TokenStore
from seqlab.evaluation.calibration import calibrate_run, load_calibration
from seqlab.evaluation.saved_chars import (
    Boundary,
    Candidate,
    TypedEmail,
    accepted_chars,
    ask_positions,
    best_threshold,
    boundaries,
    collect_typing,
    fit_setting,
    one_by_one,
    score_typing,
    simulate,
    type_emails,
    typed_span,
)
from seqlab.evaluation.scored_emails import completion_texts
from seqlab.generation.complete import Completion, complete
from seqlab.options import CalibrateOptions
from seqlab.runs.load import load_run

TEXT = "Hi\n\nsee you at the game, bye now"
START = len("Hi\n\n")


def at(fragment: str) -> int:
    """The offset in TEXT where `fragment` (unique) starts."""
    assert TEXT.count(fragment) == 1
    return TEXT.index(fragment)


def test_accepted_chars_takes_the_longest_literal_prefix_at_a_word_end() -> None:
    assert accepted_chars("see you there", "see you at") == len("see you")
    assert accepted_chars("file", "files, please") == 4  # the writer takes it and types "s,"
    assert accepted_chars("seen", "see you") == 0
    assert accepted_chars("see  you", "see you") == 3  # spacing counts: the page inserts the text literally


def test_word_starts_and_every_letter_positions() -> None:
    start, end = typed_span(TEXT, 3)
    assert TEXT[start:end] == "see you at"
    assert [TEXT[i:].split(" ")[0] for i in boundaries(TEXT, start, end)] == ["you", "at"]
    assert ask_positions(TEXT, start, end, "word-starts") == boundaries(TEXT, start, end)
    # the page asks after every keystroke once the body holds a letter: "s|", "se|", ..., "see you a|"
    assert ask_positions(TEXT, start, end) == list(range(start + 1, end))
    assert [TEXT[start:i] for i in ask_positions(TEXT, start, end)][:3] == ["s", "se", "see"]
    # a body that starts with whitespace: nothing asked until its first letter is typed
    padded = "S\n\n \n ab c"
    s, e = typed_span(padded, 2)
    assert [padded[s:i] for i in ask_positions(padded, s, e)] == [" \n a", " \n ab", " \n ab "]
    start, end = typed_span(TEXT, 100)
    assert end == len(TEXT)
    # one letter into each word that goes on: "s|ee", "y|ou", "a|t", "t|he", "g|ame,", "b|ye", "n|ow"
    mid = ask_positions(TEXT, start, end, "word-starts", mid_word=1)
    assert [TEXT[i - 1:i + 1] for i in mid if i not in boundaries(TEXT, start, end)] == [
        "se", "yo", "at", "th", "ga", "by", "no"]
    with pytest.raises(ValueError, match="word-starts only"):
        ask_positions(TEXT, start, end, "every-letter", mid_word=1)
    with pytest.raises(ValueError, match="one of every-letter, word-starts"):
        ask_positions(TEXT, start, end, "sometimes")


def test_collect_typing_asks_every_prompt_once_in_one_call_and_keeps_each_source() -> None:
    calls: list[tuple[list[str], list[list[int]]]] = []

    def model(texts, positions, contexts):
        calls.append((list(texts), [list(p) for p in positions]))
        return [[Completion("x", [1], 0.5, [0.5]) for _ in where] for where in positions]

    def memory(prompt: str, context) -> Completion | None:
        return Completion(" you", [], 0.9, [0.9], source="memory", origin="e1") if prompt.endswith("see") else None

    emails = [TEXT, "Re\n\nok then"]
    typed = collect_typing(emails, model, words=2, proposers=[memory])
    assert len(calls) == 1 and calls[0][0] == emails
    assert calls[0][1] == [ask_positions(t, *typed_span(t, 2)) for t in emails]
    with_memory = [b for b in typed[0].boundaries if "memory" in b.proposals]
    assert [TEXT[:b.offset] for b in with_memory] == ["Hi\n\nsee"]
    assert with_memory[0].proposals["memory"] == Candidate(" you", [0.9], "e1")
    assert list(with_memory[0].proposals) == ["model", "memory"]  # the model first: it wins ties
    assert typed[0].boundaries[0].text == "x"
    # the per-prompt adapter gives the same proposals
    again = collect_typing(emails, one_by_one(lambda p, c: Completion("x", [1], 0.5, [0.5])), words=2)
    assert [[b.proposals for b in e.boundaries] for e in again] == [
        [{"model": b.proposals["model"]} for b in e.boundaries] for e in typed]


def _email(*found: Boundary) -> TypedEmail:
    return TypedEmail(TEXT, START, len(TEXT), list(found))


def _model(fragment: str, text: str, confs: list[float], shift: int = 0) -> Boundary:
    return Boundary.model_only(at(fragment) + shift, text, confs)


def test_tab_takes_the_whole_ghost_for_one_key_and_ctrl_right_one_key_a_word() -> None:
    whole = simulate(_email(_model("you", "you at the", [0.9, 0.5, 0.1])), "first-word", 0.0)
    assert (whole.shown, whole.accepted, whole.wrong, whole.keystrokes, whole.saved) == (1, 1, 0, 1, 10 - 1)
    # "you at home": its first two words are right, taken by Ctrl+Right twice; the writer then types " "
    # through what is left (" home") and "t" ends it
    part = simulate(_email(_model("you", "you at home", [0.9, 0.5, 0.1])), "first-word", 0.0)
    assert (part.shown, part.accepted, part.wrong, part.keystrokes, part.saved) == (1, 1, 0, 2, 6 - 2)
    assert part.typed_through == 1
    # a right one-character first word saves nothing: typed through, neither taken nor wrong
    comma = simulate(_email(_model("game,", ", hi", [0.9, 0.9], shift=4)), "first-word", 0.0)
    assert (comma.shown, comma.accepted, comma.wrong, comma.saved, comma.typed_through) == (1, 0, 0, 0, 2)


def test_a_ghost_typed_through_is_not_asked_or_counted_again() -> None:
    e = _email(
        _model("you", "yes", [0.9]),  # wrong; the writer types "y" through it, then "o" ends it
        _model("ou at", "es", [0.9]),  # the remainder one letter on: the page does not ask under a ghost
        _model("u at", "u at", [0.9, 0.9]),  # asked after the "o" that ended the ghost: right, taken by Tab
        _model(" at", "wrong", [0.9]),  # inside the text just taken: never asked
        _model("the", "the game", [0.9, 0.9]),
    )
    t = simulate(e, "first-word", 0.0)
    assert (t.shown, t.wrong, t.typed_through, t.accepted) == (3, 1, 1, 2)
    assert t.saved == (4 - 1) + (8 - 1)


def test_the_source_with_the_best_weighted_value_is_shown() -> None:
    model = Candidate("you at", [0.5, 0.4])  # values 0.5 * 2, 0.4 * 5: best 2.0
    memory = Candidate("you at the game,", [0.2, 0.2, 0.2, 0.2], "sent/1")  # best 0.2 * 15 = 3.0
    e = _email(Boundary(at("you"), {"model": model, "memory": memory}))
    full = simulate(e, "expected-chars", 0.0)
    assert full.saved_by == {"memory": 16 - 1} and full.shown_by == {"memory": 1}
    half = simulate(e, "expected-chars", 0.0, {"memory": 0.5})  # 0.1 * 15 = 1.5 < 2.0
    assert half.saved_by == {"model": 6 - 1}
    assert simulate(e, "expected-chars", 0.0, {"memory": 0.0}).saved_by == {"model": 5}
    # the weight gates too: memory at weight 4 is worth min(1, 0.8) * 15 = 12 and passes 10
    assert simulate(e, "expected-chars", 10.0, {"memory": 4.0}).saved_by == {"memory": 15}
    assert simulate(e, "expected-chars", 10.0).shown == 0
    with pytest.raises(ValueError, match="0 or more"):
        simulate(e, "expected-chars", 0.0, {"memory": -1.0})


def test_per_source_shares_add_up_to_the_total() -> None:
    e = _email(Boundary(at("you"), {"model": Candidate("you", [0.9]), "memory": Candidate("yes", [0.1])}),
               Boundary(at("the"), {"model": Candidate("the game", [0.2, 0.1]),
                                    "memory": Candidate("the game, bye", [0.9, 0.9, 0.9])}),
               Boundary(at("now"), {"reply": Candidate("now", [0.95])}))
    row = score_typing([e, e], "expected-chars", 0.0)
    assert row["saved_chars_by_source"] == {"memory": 2 * 12, "model": 2 * 2, "reply": 2 * 2}
    assert sum(row["saved_chars_by_source"].values()) == row["saved_chars"]
    assert sum(row["saved_by_source"].values()) == pytest.approx(1.0)
    assert row["saved"] == pytest.approx(row["saved_chars"] / row["chars"])


def test_hand_count_under_both_rules() -> None:
    e = _email(
        _model("you", "you at the", [0.9, 0.5, 0.1]),  # right: accepted whole, skips "at" and "the"
        _model("at", "at", [0.9]),  # never asked: inside the accepted text
        _model("game,", "match", [0.6]),  # wrong
        _model("bye", ".", [0.95]),  # lone punctuation: shown only by first-word, and wrong
        _model("now", "now", [0.3]),  # right, three characters
    )
    first = simulate(e, "first-word", 0.0)
    assert (first.shown, first.wrong, first.accepted, first.saved) == (4, 2, 2, 9 + 2)
    assert first.chars == len(TEXT) - START and first.words == 7
    ec = simulate(e, "expected-chars", 0.0)
    # no lone "."; "you at the" is worth max(0.9 * 2, 0.5 * 5, 0.1 * 9) = 2.5 at two words: "you at" is
    # shown, saving 5, and "now" 2
    assert (ec.shown, ec.wrong, ec.saved) == (3, 1, 5 + 2)
    sure = simulate(e, "expected-chars", 2.45)  # "match" is worth 0.6 * 4 = 2.4, "now" 0.3 * 2
    assert (sure.shown, sure.wrong, sure.saved) == (1, 0, len("you at") - 1)
    row = score_typing([e], "first-word", 0.0)
    assert row["saved"] == pytest.approx(11 / first.chars)
    assert row["wrong_per_100_words"] == pytest.approx(100 * 2 / 7)


def _hand_email() -> TypedEmail:
    return _email(_model("you", "you at the", [0.9, 0.5, 0.1]), _model("game,", "match", [0.6]),
                  _model("bye", ".", [0.95]), _model("now", "now", [0.3]))


def test_bootstrap_intervals_hold_the_estimate_and_repeat_with_the_seed() -> None:
    emails = [_hand_email(), TypedEmail("S\n\na b c", 3, 8, [])] * 3
    a, b = score_typing(emails, "first-word", 0.0, seed=1), score_typing(emails, "first-word", 0.0, seed=1)
    assert a == b
    lo, hi = a["saved_ci95"]
    assert lo <= a["saved"] <= hi and lo < hi


def test_best_threshold_keeps_to_the_cap() -> None:
    emails = [_hand_email()] * 4
    free = best_threshold(emails, "first-word", 100.0)
    capped = best_threshold(emails, "first-word", 0.0)
    assert free["saved"] >= capped["saved"]
    assert capped["wrong_per_100_words"] == 0.0 and capped["within_cap"]
    assert free["wrong_per_100_words"] <= 100.0


def test_fit_setting_is_the_best_of_best_threshold_over_the_weight_grid() -> None:
    # memory is right at "you" and wrong at "game,"; the model proposes little: the fit must weigh both
    e = _email(Boundary(at("you"), {"model": Candidate("you", [0.3]), "memory": Candidate("you at the", [0.3] * 3)}),
               Boundary(at("game,"), {"model": Candidate("game,", [0.2]), "memory": Candidate("match", [0.5])}))
    emails = [e] * 3
    grid = (0.0, 0.5, 1.0, 3.0)
    fit = fit_setting(emails, "expected-chars", 15.0, {"memory": grid})
    each = [best_threshold(emails, "expected-chars", 15.0, weights={"memory": w}) for w in grid]
    assert fit["settings_tried"] == 4
    assert fit["saved"] == max(r["saved"] for r in each if r["within_cap"])
    assert fit["within_cap"] and fit["wrong_per_100_words"] <= 15.0
    assert fit["weights"] in [r["weights"] for r in each if r["saved"] == fit["saved"]]
    assert fit_setting(emails, "expected-chars", 15.0, grid) == fit  # one grid for every other source


def test_the_fit_is_served_only_when_sure_to_save_more_than_the_default() -> None:
    from seqlab.evaluation.saved_fit import fit_served, gain_lower_bound

    # the memory remembers "you at the game," and the model proposes nothing: memory on saves 15 a time
    remembered = _email(Boundary(at("you"), {"memory": Candidate("you at the game,", [0.9] * 4)}))
    plain = _email()
    off = ("general", 0.0, {"memory": 0.0})
    every = fit_served({"learned": [remembered] * 6, "general": [remembered] * 6}, off, "expected-chars", 3.0,
                       {"memory": (0.0, 1.0)})
    assert every["fitted"] and every["model"] == "learned" and every["weights"] == {"memory": 1.0}
    assert every["gain_low"] == pytest.approx(15 / len(TEXT[START:]))  # the same gain in every email
    assert every["saved_by_model"] == {"learned": every["saved"], "general": every["saved"]}
    # remembered once in 20 emails: the fit saves more on them, but a resample without that email often
    # does not; the default stays, scored as it is served
    once = [remembered] + [plain] * 19
    lucky = fit_served({"general": once}, off, "expected-chars", 3.0, {"memory": (0.0, 1.0)})
    assert not lucky["fitted"] and lucky["model"] == "general" and lucky["weights"] == {"memory": 0.0}
    assert lucky["saved"] == 0.0 and lucky["saved_by_model"]["general"] > 0.0 and lucky["gain_low"] == 0.0
    # the bound is the quantile of the paired bootstrap: at the top it is the luckiest resample's gain
    fits = [simulate(e, "expected-chars", 0.0) for e in once]
    base = [simulate(e, "expected-chars", 0.0, {"memory": 0.0}) for e in once]
    assert gain_lower_bound(fits, base, 0.0) == 0.0 < gain_lower_bound(fits, base, 0.5) \
        < gain_lower_bound(fits, base, 1.0)
    with pytest.raises(ValueError, match="default model"):
        fit_served({"learned": once}, off)


_WORD_OF_GHOST = re.compile(r"^[ \t\n\r\f\v]*[^ \t\n\r\f\v]+")  # ghost_core.js's nextWord


def _live(model, tok, text: str, words: int, rule: str, threshold: float, ask: str, mid_word: int = 0
          ) -> tuple[int, int, int, int]:
    """Type `text` key by key as compose.js behaves, calling `complete` with the rule whenever the page
    asks (at an asked position with no ghost on screen): (saved, shown, wrong, typed through)."""
    start, end = typed_span(text, words)
    asked = set(ask_positions(text, start, end, ask, mid_word))
    pos, ghost = start, ""
    saved = shown = wrong = through = 0
    while pos < end:
        if not ghost and pos in asked:
            ghost = complete(model, tok, text[:pos], max_words=3, rule=rule, threshold=threshold).text
            if ghost:
                shown += 1
                wrong += not text[pos:end].startswith(_WORD_OF_GHOST.match(ghost)[0])
        if ghost:
            # Ctrl+Right while the next word is right; a writer who got all of it would have pressed Tab once
            took, presses = 0, 0
            while took < len(ghost):
                step = _WORD_OF_GHOST.match(ghost[took:])[0]
                if not text[pos:end].startswith(ghost[:took + len(step)]):
                    break
                took, presses = took + len(step), presses + 1
            keys = 1 if took == len(ghost) else presses
            if took > keys:
                saved, pos, ghost = saved + took - keys, pos + took, ghost[took:]
                continue
            if ghost[0] == text[pos]:
                through, ghost = through + 1, ghost[1:]
            else:
                ghost = ""
        pos += 1
    return saved, shown, wrong, through


@pytest.mark.parametrize(("run", "rule", "threshold", "ask", "mid_word"), [
    ("word_run_dir", "first-word", 0.0, "every-letter", 0), ("word_run_dir", "expected-chars", 0.1, "every-letter", 0),
    ("word_run_dir", "expected-chars", 0.0, "word-starts", 0), ("word_run_dir", "first-word", 0.05, "word-starts", 0),
    ("word_run_dir", "expected-chars", 0.1, "word-starts", 1)])
def test_the_replay_equals_typing_live_through_complete(request: pytest.FixtureRequest, tiny_data_dir: Path,
                                                        run: str, rule: str, threshold: float, ask: str,
                                                        mid_word: int) -> None:
    model, tok, _ = load_run(request.getfixturevalue(run), "cpu")
    texts = completion_texts(TokenStore(tiny_data_dir, "val"), tok, 3, 0)
    typed = type_emails(model, tok, texts, words=12, ask=ask, mid_word=mid_word)
    got = [simulate(e, rule, threshold) for e in typed]
    assert sum(t.shown for t in got) > 0 and (threshold > 0 or sum(t.saved for t in got) > 0)  # not vacuous
    for text, t in zip(texts, got):
        assert (t.saved, t.shown, t.wrong, t.typed_through) == _live(model, tok, text, 12, rule, threshold, ask,
                                                                      mid_word)


def test_calibrate_for_saved_characters_is_what_the_server_reads(gru_run_dir: Path, tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(gru_run_dir, run)
    got = calibrate_run(run, CalibrateOptions(split="val", emails=4, target="saved", rule="expected-chars",
                                              max_wrong_per_100=20.0, words=10))
    kept = load_calibration(run)
    assert kept is not None and kept["rule"] == "expected-chars" and kept["threshold"] == got["threshold"]
    assert got["ask"] == "every-letter"
    assert got["wrong_per_100_words"] <= 20.0 or not got["within_cap"]
    from seqlab.serving.app import ServerConfig, load_engine

    engine, info = load_engine(ServerConfig(run_dir=run))
    assert (engine.rule, engine.threshold) == ("expected-chars", got["threshold"])
    (run / "calibration.json").write_text(json.dumps({"threshold": 3.0}))  # no rule: a first word's probability
    with pytest.raises(Exception, match="between 0 and 1"):
        load_calibration(run)


def test_tradeoff_command_writes_the_curve(gru_run_dir: Path, tmp_path: Path, capsys) -> None:
    assert main(["tradeoff", str(gru_run_dir), "--out", str(tmp_path / "t"), "--split", "val", "--emails", "3",
                 "--words", "8", "--ask", "word-starts"]) == 0
    out = capsys.readouterr().out
    assert "| first-word |" in out and "| expected-chars |" in out
    result = json.loads((tmp_path / "t" / "tradeoff.json").read_text())
    assert {r["rule"] for r in result["curve"]} == {"first-word", "expected-chars", "chars-per-wrong"}
    assert result["ask"] == "word-starts"
    assert (tmp_path / "t" / "tradeoff.png").stat().st_size > 1000
    assert main(["eval", str(gru_run_dir), "--saved-threshold", "2", "--rule", "first-word",
                 "--completion-emails", "2"]) == 2
    assert main(["tradeoff", str(gru_run_dir), "--out", str(tmp_path / "u"), "--mid-word", "1"]) == 2


def test_the_kept_gate_values_decide_as_kept_words() -> None:
    import random

    from seqlab.evaluation.typing_sim import Choice
    from seqlab.generation.gate import kept_words

    rng = random.Random(0)
    pieces = ["a", "the", ",", ".", " -", "files,", "x1", "!!"]
    for _ in range(500):
        text = "".join(rng.choice(["", " "]) + rng.choice(pieces) for _ in range(rng.randint(1, 4)))
        confs = sorted((rng.random() for _ in range(rng.randint(1, 4))), reverse=True)
        if not text.strip():
            continue
        c = Choice.of("model", text, confs)
        for rule, threshold in [("first-word", None), ("first-word", 0.0), ("first-word", rng.random()),
                                ("expected-chars", None), ("expected-chars", 0.0),
                                ("expected-chars", 3 * rng.random())]:
            assert c.shown_words(rule, threshold) == kept_words(text, confs, rule, threshold), (text, confs, rule)


def test_the_person_s_memory_as_an_extra_proposer_saves_what_it_remembers() -> None:
    from seqlab.generation.memory import WritingMemory

    memory = WritingMemory()
    memory.add("Friday\n\nthanks for the report, see you on monday at the office", "sent/1")
    silent = one_by_one(lambda prompt, context: Completion(""))  # a model that never proposes
    email = "Monday\n\nthanks for the report, see you on monday at the office"
    typed = collect_typing([email], silent, words=50, proposers=[memory.propose])
    row = score_typing(typed, "expected-chars", 0.0)
    assert row["saved_chars"] > 0 and row["saved_by_source"] == {"memory": 1.0}
    assert {b.proposals["memory"].origin for b in typed[0].boundaries if "memory" in b.proposals} == {"sent/1"}
    # weighed out, it saves nothing
    assert score_typing(typed, "expected-chars", 0.0, weights={"memory": 0.0})["saved_chars"] == 0
