"""Saved characters, the product metric: how much typing the suggestions would have saved a writer.

Whole emails are typed, not sampled positions. ExactMatch's sampled positions (`exact_match.py`) are
independent draws, but what a suggestion saves depends on where the writer is: accepting three words skips
the two word boundaries inside them, where other suggestions would have been asked for. So each held-out
email's body (its first `words` words; the subject is in the prompt, as the compose page sends it, but
not typed) is typed by a simulated writer, left to right:

- at every word boundary reached (a position after whitespace where a word starts, past the body's first
  word: where a writer pauses and the compose page asks), the model proposes up to `max_words` words for
  the text so far (greedy, `seqlab.generation.complete`), and the rule and threshold decide what is shown
  (`seqlab.generation.gate.kept_words`);
- the writer accepts the shown suggestion up to its first wrong word: its longest prefix ending at one of
  its word ends that is literally the email's next characters (case, punctuation and spacing included; a
  suggested "file" before the email's "files," is right: the writer takes it and types "s,"). Accepting
  costs one keystroke, so it saves `chars - 1` characters, and a writer accepts only when that is positive;
- a shown suggestion whose first word is already wrong is a WRONG suggestion shown (a correct one-character
  word saves nothing and is not counted wrong);
- the writer then goes on from the end of what was accepted (or types the next word) to the next boundary.

    saved share = sum over emails of saved characters / sum over emails of characters typed without help
    wrong per 100 words = 100 * wrong suggestions shown / words typed

Each is a ratio of sums over emails, so its 95% interval is a percentile bootstrap over emails (Efron &
Tibshirani 1993, ch. 13): emails resampled with replacement `BOOTSTRAP` times with a fixed seed; emails, not
positions, are the independent units (positions of one email share its topic and style).

A greedy proposal depends only on the text before it, so proposals are computed once at EVERY boundary of
the typed part (`collect_typing`), unthresholded, and any rule and threshold is then a replay over them
(`simulate`): the trade-off curve (`tradeoff_curve`) and the best threshold under a cap on wrong suggestions
(`best_threshold`, `seqlab calibrate --target saved`) cost no more model calls. Only boundaries, not every
keystroke inside a word, are asked at by default; the compose page also asks mid-word, so this is what
suggestions at word starts alone would save. `mid_word=k` (`seqlab tradeoff --mid-word K`) also asks once
k letters into each word, where token healing completes the word being typed (`seqlab.generation.complete`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from seqlab.data.tokenizer import Tokenizer
from seqlab.generation.complete import Completion, complete, split_words
from seqlab.generation.gate import EXPECTED_CHARS, FIRST_WORD, RULES, kept_words, prefix_values, word_ends

BOOTSTRAP = 1000  # resamples for the 95% intervals
# the grids the trade-off curve is drawn at: a first word's probability, and expected saved characters
CURVE_THRESHOLDS = {
    FIRST_WORD: (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95),
    EXPECTED_CHARS: (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0),
}
MAX_WRONG_PER_100 = 5.0  # the cap `best_threshold` keeps to by default: a wrong suggestion at most once per 20 words

_SPACE = " \t\n\r\f\v"


@dataclass
class Boundary:
    """One word boundary of a typed email and the unthresholded proposal there."""

    offset: int  # character offset in the email text where the proposal would be inserted
    text: str  # the proposal ('' when the model proposed no whole word)
    word_confidences: list[float] = field(default_factory=list)  # P(first k words), k = 1..


@dataclass
class TypedEmail:
    """An email's typed part, [start, end) of its text, with the proposals at its word boundaries."""

    text: str
    start: int
    end: int
    boundaries: list[Boundary]

    @property
    def chars(self) -> int:
        return self.end - self.start

    @property
    def words(self) -> int:
        return len(split_words(self.text[self.start:self.end]))


def typed_span(text: str, words: int) -> tuple[int, int]:
    """[start, end) of the part of an email a writer types: its body (after the subject's blank line),
    up to the end of its `words`-th word."""
    cut = text.find("\n\n")
    start = cut + 2 if cut >= 0 else 0
    ends = word_ends(text[start:])
    end = start + (ends[words - 1] if len(ends) >= words else len(text) - start)
    return start, end


def boundaries(text: str, start: int, end: int, mid_word: int = 0) -> list[int]:
    """Offsets i in (start, end) where text[i-1] is whitespace, text[i] is not, and a word was typed before;
    with `mid_word` k > 0 also k characters into each word that goes on after them (the writer typed its
    first k letters), the body's first word included."""
    out, seen_word = [], False
    for i in range(start, end):
        if text[i] in _SPACE:
            continue
        word_start = i == start or text[i - 1] in _SPACE
        if word_start and i > start and seen_word:
            out.append(i)
        if word_start and mid_word > 0:
            inside = i + mid_word
            if inside < end and not any(ch in _SPACE for ch in text[i:inside + 1]):
                out.append(inside)
        seen_word = True
    return sorted(out)


def collect_typing(emails: Sequence[str], propose: Callable[..., Completion], *, words: int = 50,
                   contexts: Sequence[Any] | None = None, mid_word: int = 0) -> list[TypedEmail]:
    """Ask `propose(prefix)` (or `propose(prefix, context)`) at every boundary of each email's typed part
    (and `mid_word` characters into each word, `boundaries`); `propose` must apply no threshold (the rules
    are replayed by `simulate`)."""
    if words < 1:
        raise ValueError(f"words per email must be at least 1, not {words}")
    out = []
    for e, text in enumerate(emails):
        start, end = typed_span(text, words)
        found = []
        for i in boundaries(text, start, end, mid_word):
            c = propose(text[:i]) if contexts is None else propose(text[:i], contexts[e])
            found.append(Boundary(i, c.text, list(c.word_confidences)))
        out.append(TypedEmail(text, start, end, found))
    return out


@dataclass
class Typing:
    """What a writer of one email got from the suggestions under one rule and threshold."""

    chars: int  # characters of the typed part
    words: int  # words of the typed part
    saved: int = 0  # characters saved: accepted characters minus one keystroke per acceptance
    shown: int = 0  # suggestions shown
    accepted: int = 0  # suggestions accepted (some prefix right and longer than one character)
    wrong: int = 0  # suggestions shown whose first word was wrong


def accepted_chars(shown: str, truth: str) -> int:
    """Characters of `shown` a writer accepts: its longest prefix ending at a word end of `shown` that `truth`
    starts with (0 when its first word is wrong)."""
    best = 0
    for end in word_ends(shown):
        if not truth.startswith(shown[:end]):
            break
        best = end
    return best


def simulate(email: TypedEmail, rule: str, threshold: float | None) -> Typing:
    """Type `email` with suggestions shown by `rule` at `threshold` (see module doc)."""
    out = Typing(email.chars, email.words)
    at = email.start  # where the writer is
    for b in email.boundaries:
        if b.offset < at:
            continue  # inside text already accepted
        k = kept_words(b.text, b.word_confidences, rule, threshold)
        if k == 0:
            continue
        shown = b.text[: word_ends(b.text)[k - 1]]
        out.shown += 1
        took = accepted_chars(shown, email.text[b.offset:email.end])
        if took == 0:
            out.wrong += 1
        elif took > 1:
            out.accepted += 1
            out.saved += took - 1
            at = b.offset + took
    return out


def _ratio(parts: Sequence[Typing], top: str, bottom: str, scale: float) -> float | None:
    den = sum(getattr(t, bottom) for t in parts)
    return scale * sum(getattr(t, top) for t in parts) / den if den else None


def bootstrap_interval(parts: Sequence[Typing], top: str, bottom: str, scale: float = 1.0,
                       resamples: int = BOOTSTRAP, seed: int = 0) -> list[float] | None:
    """95% percentile interval of scale * sum(top) / sum(bottom) over emails resampled with replacement."""
    if not parts:
        return None
    rng = random.Random(seed)
    n = len(parts)
    stats = sorted(r for r in (_ratio([parts[rng.randrange(n)] for _ in range(n)], top, bottom, scale)
                               for _ in range(resamples)) if r is not None)
    if not stats:
        return None
    return [stats[int(0.025 * (len(stats) - 1))], stats[int(0.975 * (len(stats) - 1))]]


def score_typing(typed: Sequence[TypedEmail], rule: str, threshold: float | None, *,
                 intervals: bool = True, seed: int = 0) -> dict[str, Any]:
    """The saved share and wrong suggestions per 100 words of `typed` under one rule and threshold, with
    totals, and (with `intervals`) 95% bootstrap intervals over emails."""
    parts = [simulate(e, rule, threshold) for e in typed]
    row: dict[str, Any] = {
        "rule": rule, "threshold": threshold, "emails": len(parts),
        "chars": sum(t.chars for t in parts), "words": sum(t.words for t in parts),
        "saved_chars": sum(t.saved for t in parts), "shown": sum(t.shown for t in parts),
        "accepted": sum(t.accepted for t in parts), "wrong": sum(t.wrong for t in parts),
        "saved": _ratio(parts, "saved", "chars", 1.0), "wrong_per_100_words": _ratio(parts, "wrong", "words", 100.0),
    }
    if intervals:
        row["saved_ci95"] = bootstrap_interval(parts, "saved", "chars", seed=seed)
        row["wrong_per_100_words_ci95"] = bootstrap_interval(parts, "wrong", "words", 100.0, seed=seed)
    return row


def tradeoff_curve(typed: Sequence[TypedEmail], rules: Sequence[str] = RULES,
                   thresholds: dict[str, Sequence[float]] | None = None) -> list[dict[str, Any]]:
    """`score_typing` rows (no intervals) for each rule at each of its thresholds (`CURVE_THRESHOLDS`)."""
    grid = thresholds or CURVE_THRESHOLDS
    return [score_typing(typed, rule, t, intervals=False) for rule in rules for t in grid[rule]]


def candidate_thresholds(typed: Sequence[TypedEmail], rule: str, count: int = 200) -> list[float]:
    """Up to `count` thresholds spread over the quantiles of what the rule compares at each boundary (the
    first word's probability, or the best prefix's expected saved characters), 0, and one just above the
    largest (nothing shown)."""
    values = []
    for e in typed:
        for b in e.boundaries:
            if b.word_confidences:
                values.append(b.word_confidences[0] if rule == FIRST_WORD
                              else max(prefix_values(b.text, b.word_confidences)))
    values.sort()
    if not values:
        return [0.0]
    picks = {values[int(q * (len(values) - 1) / max(1, count - 1))] for q in range(count)}
    above = math.nextafter(values[-1], math.inf)  # shows nothing: within any cap
    if rule != FIRST_WORD or above <= 1.0:
        picks.add(above)
    return sorted(picks | {0.0})


def best_threshold(typed: Sequence[TypedEmail], rule: str = EXPECTED_CHARS,
                   max_wrong_per_100: float = MAX_WRONG_PER_100) -> dict[str, Any]:
    """The threshold (among `candidate_thresholds`) whose saved share is largest while wrong suggestions
    stay at most `max_wrong_per_100` per 100 words; the highest threshold tried when none keeps to the cap.
    Returns `score_typing`'s row there, with intervals, and "max_wrong_per_100"."""
    if rule not in RULES:
        raise ValueError(f"the suggestion rule must be one of {', '.join(RULES)}, not {rule!r}")
    if not max_wrong_per_100 >= 0:
        raise ValueError(f"the cap on wrong suggestions per 100 words must be 0 or more, not {max_wrong_per_100}")
    cands = candidate_thresholds(typed, rule)
    rows = [score_typing(typed, rule, t, intervals=False) for t in cands]
    ok = [r for r in rows if (r["wrong_per_100_words"] or 0.0) <= max_wrong_per_100]
    # the largest saved share; on ties the higher threshold (fewer suggestions shown for the same saving)
    pick = max(ok, key=lambda r: ((r["saved"] or 0.0), r["threshold"])) if ok else rows[-1]
    return {**score_typing(typed, rule, pick["threshold"]), "max_wrong_per_100": max_wrong_per_100,
            "within_cap": bool(ok)}


def type_emails(model: nn.Module, tokenizer: Tokenizer, emails: Sequence[str], *, words: int = 50,
                max_words: int = 3, phrases: Any = None, contexts: Sequence[Any] | None = None,
                mid_word: int = 0) -> list[TypedEmail]:
    """`collect_typing` with `model`'s greedy, unthresholded proposals of up to `max_words` words (the
    compose page asks for 3), blended with `phrases` when given, reading each email's context when given."""
    def propose(prefix: str, context: Any = None) -> Completion:
        return complete(model, tokenizer, prefix, max_words=max_words, temperature=0.0, phrases=phrases,
                        context=context, rule=FIRST_WORD)

    return collect_typing(emails, propose, words=words, contexts=contexts, mid_word=mid_word)


def saved_report(typed: Sequence[TypedEmail], rule: str, threshold: float | None,
                 max_wrong_per_100: float = MAX_WRONG_PER_100) -> dict[str, Any]:
    """What `seqlab eval` reports: the saved share at `rule`/`threshold` (the served setting), and for each
    rule the best threshold on these emails under the cap (`best_threshold`: chosen on the split it is
    scored on, so an optimistic reading; `seqlab calibrate --target saved` chooses it on val)."""
    return {"at": score_typing(typed, rule, threshold),
            "best": [best_threshold(typed, r, max_wrong_per_100) for r in RULES]}
