"""A simulated writer typing one email with the compose page's suggestions: the replay behind saved characters.

What is replayed is what `seqlab/serving/static/compose.js` does, over proposals collected beforehand
(`saved_chars.collect_typing`): at each asked position (`Boundary`) every source's unthresholded proposal
is kept, so any rule, threshold and blend weight is a replay with no model call.

- Choosing. At an asked position with no suggestion on screen, each source's proposal is weighed: a
  source other than the model has its word_confidences multiplied by its weight (capped at 1; the model's
  weight is 1 unless given), and the proposal whose best expected-characters prefix value
  (`seqlab.generation.gate.prefix_values`) is largest is the one the rule and threshold gate (ties go to
  the source listed first, the model). What the gate keeps is SHOWN; a shown suggestion whose first word
  is not the email's next characters is WRONG (a right one-character word is neither wrong nor worth taking).
- Accepting, as the page's keys do: Tab inserts the whole ghost (one keystroke), Ctrl+Right its next word
  (leading spaces and a run of non-spaces; one keystroke each). The writer takes the longest prefix of
  the ghost that ends at one of its word ends and is literally the email's next characters: all of it
  for 1 keystroke, or its first j words for j keystrokes, and takes it only when that saves something
  (characters taken > keystrokes).
- Typing through. While a ghost is on screen the page asks nothing: a typed character that is the ghost's
  next one shrinks it (counted as typed through, not saved), and the writer may still take what is left;
  a character that is not ends it, and the page asks again after that character. A ghost taken whole or
  typed out ends too, and the page asks again at once. So the remainder of a suggestion is never counted
  again as shown or wrong, and the proposals at positions passed under a ghost are not used.

    saved = characters inserted by Tab and Ctrl+Right - keystrokes spent on them
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from seqlab.generation.complete import Completion, split_words
from seqlab.generation.gate import FIRST_WORD, has_word_character, prefix_values, value_passes, word_ends

MODEL = "model"


@dataclass
class Candidate:
    """One source's unthresholded proposal at an asked position."""

    text: str  # '' when the source proposed no whole word
    word_confidences: list[float] = field(default_factory=list)  # P(first k words), k = 1..
    origin: str | None = None  # for memory: the earlier email it came from
    # (source, weight) -> this proposal as a `Choice` (`weighed`): a fit tries many weights of the other
    # sources, and the model's proposal (weight 1 in all of them) is the same Choice in each
    _weighed: dict[tuple[str, float], Choice | None] = field(default_factory=dict, repr=False, compare=False)

    def weighed(self, source: str, weight: float) -> Choice | None:
        """This proposal as `source`'s `Choice`, its word confidences multiplied by `weight` (capped at 1); None
        when it proposes no whole word."""
        key = (source, weight)
        if key not in self._weighed:
            confs = self.word_confidences if weight == 1.0 else [min(1.0, weight * q) for q in self.word_confidences]
            self._weighed[key] = Choice.of(source, self.text, confs) if confs and word_ends(self.text) else None
        return self._weighed[key]

    @classmethod
    def of(cls, c: Completion) -> Candidate:
        return cls(c.text, list(c.word_confidences), c.origin)


@dataclass
class Boundary:
    """An asked position of a typed email and each source's proposal there (the model's always; dict
    order is the tie order: the model first)."""

    offset: int  # character offset in the email text where a proposal would be inserted
    proposals: dict[str, Candidate] = field(default_factory=dict)

    @classmethod
    def model_only(cls, offset: int, text: str, word_confidences: list[float]) -> Boundary:
        return cls(offset, {MODEL: Candidate(text, list(word_confidences))})

    @property
    def text(self) -> str:
        """The model's proposal."""
        c = self.proposals.get(MODEL)
        return c.text if c else ""

    @property
    def word_confidences(self) -> list[float]:
        c = self.proposals.get(MODEL)
        return c.word_confidences if c else []


@dataclass(frozen=True)
class Choice:
    """The proposal chosen at a position under some weights, with its weighted confidences and what the
    gate reads from them, computed once (`Choice.of`) since a threshold sweep gates it many times."""

    source: str
    text: str
    word_confidences: list[float]
    ends: tuple[int, ...]  # word ends of `text`, as many as there are confidences
    best: int  # expected-chars: index of the prefix worth the most (the shortest on ties)
    best_value: float  # its value_k
    best_lettered: bool  # whether that prefix holds a letter or digit
    all_lettered: bool  # whether the whole proposal does

    @classmethod
    def of(cls, source: str, text: str, confs: list[float]) -> Choice:
        ends = tuple(word_ends(text)[: len(confs)])
        values = prefix_values(text, confs[: len(ends)])
        best = max(range(len(ends)), key=lambda k: (values[k], -k))
        return cls(source, text, confs, ends, best, values[best], has_word_character(text[: ends[best]]),
                   has_word_character(text[: ends[-1]]))

    def shown_words(self, rule: str, threshold: float | None) -> int:
        """`seqlab.generation.gate.kept_words` of this proposal, from the values kept."""
        n = len(self.ends)
        if rule == FIRST_WORD:
            return n if threshold is None else sum(q >= threshold for q in self.word_confidences[:n])
        if threshold is None:
            return n if self.all_lettered else 0
        passes = value_passes(self.best_value, self.word_confidences[0], rule, threshold)
        return self.best + 1 if self.best_lettered and passes else 0


@dataclass
class TypedEmail:
    """An email's typed part, [start, end) of its text, with the proposals at its asked positions."""

    text: str
    start: int
    end: int
    boundaries: list[Boundary]
    # weights key -> the Choice (or None) at each boundary: the choice does not depend on the rule or
    # threshold, so a threshold sweep computes it once
    _chosen: dict[tuple[tuple[str, float], ...], list[Choice | None]] = field(
        default_factory=dict, repr=False, compare=False)
    # (weights key, boundary, words shown) -> what follows (`stretch`), for the same reason
    _stretches: dict[tuple[tuple[tuple[str, float], ...], int, int], Stretch] = field(
        default_factory=dict, repr=False, compare=False)

    @property
    def chars(self) -> int:
        return self.end - self.start

    @property
    def words(self) -> int:
        return len(split_words(self.text[self.start:self.end]))

    def sources(self) -> set[str]:
        return {s for b in self.boundaries for s in b.proposals}

    def to_json(self) -> dict[str, Any]:
        """As JSON (the server keeps each sent email as it was typed, `serving/recalibrate.py`)."""
        return {"text": self.text, "start": self.start, "end": self.end,
                "boundaries": [[b.offset, {s: [c.text, c.word_confidences, c.origin] for s, c in b.proposals.items()}]
                               for b in self.boundaries]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TypedEmail:
        """`to_json`'s inverse; ValueError (or KeyError, TypeError) on anything else."""
        found = [Boundary(int(offset), {str(s): Candidate(str(t), [float(x) for x in conf], origin)
                                        for s, (t, conf, origin) in proposals.items()})
                 for offset, proposals in data["boundaries"]]
        return cls(str(data["text"]), int(data["start"]), int(data["end"]), found)


def weights_key(weights: Mapping[str, float] | None) -> tuple[tuple[str, float], ...]:
    """A hashable form of `weights` (a missing source weighs 1)."""
    for source, w in (weights or {}).items():
        if not w >= 0:
            raise ValueError(f"the weight of source {source!r} must be 0 or more, not {w}")
    return tuple(sorted((weights or {}).items()))


def choose(b: Boundary, weights: Mapping[str, float] | None = None) -> Choice | None:
    """The proposal at `b` with the largest best prefix value after weighting (module doc); None when no
    source proposed a word (or every one that did weighs 0)."""
    best: Choice | None = None
    for source, c in b.proposals.items():
        w = (weights or {}).get(source, 1.0)
        choice = c.weighed(source, w) if w > 0 else None
        if choice is None:
            continue
        if best is None or choice.best_value > best.best_value:
            best = choice
    return best


def chosen(email: TypedEmail, weights: Mapping[str, float] | None = None) -> list[Choice | None]:
    """`choose` at each boundary of `email`, kept on the email per weights."""
    key = weights_key(weights)
    if key not in email._chosen:
        email._chosen[key] = [choose(b, weights) for b in email.boundaries]
    return email._chosen[key]


@dataclass
class Typing:
    """What a writer of one email got from the suggestions under one rule, threshold and weights."""

    chars: int  # characters of the typed part
    words: int  # words of the typed part
    saved: int = 0  # characters inserted by Tab / Ctrl+Right minus the keystrokes spent on them
    shown: int = 0  # suggestions newly shown
    accepted: int = 0  # suggestions of which the writer took something (once each)
    wrong: int = 0  # suggestions shown whose first word was wrong
    keystrokes: int = 0  # Tab and Ctrl+Right presses
    typed_through: int = 0  # characters typed by hand that were the ghost's next character
    saved_by: dict[str, int] = field(default_factory=dict)  # saved characters per source
    shown_by: dict[str, int] = field(default_factory=dict)
    wrong_by: dict[str, int] = field(default_factory=dict)


def right_prefix(shown: str, truth: str, at: int = 0, end: int | None = None,
                 ends: Sequence[int] | None = None) -> tuple[int, int]:
    """(characters, words) of the longest prefix of `shown` ending at one of its word ends (`ends`, when
    known) that truth[at:end] starts with ((0, 0) when its first word is wrong)."""
    took = words = 0
    stop = len(truth) if end is None else end
    for j, e in enumerate(word_ends(shown) if ends is None else ends, 1):
        if not truth.startswith(shown[:e], at, stop):
            break
        took, words = e, j
    return took, words


def accepted_chars(shown: str, truth: str) -> int:
    """Characters of `shown` a writer could take (`right_prefix`)."""
    return right_prefix(shown, truth)[0]


def _bump(counts: dict[str, int], source: str, by: int = 1) -> None:
    counts[source] = counts.get(source, 0) + by


@dataclass(frozen=True)
class Stretch:
    """What follows a suggestion shown at one boundary, `k` words of the proposal chosen there, until the page
    asks again: it depends on neither the rule nor the threshold, so a threshold sweep computes it once."""

    after: int  # the next boundary asked (len(boundaries) when none is)
    saved: int
    accepted: int  # 1 when the writer took something of it
    wrong: int  # 1 when its first word was wrong
    keystrokes: int
    typed_through: int


def next_asked(email: TypedEmail, i: int, at: int) -> int:
    """The boundary the page asks at next, after asking at boundary `i` with the writer now at `at` without a
    ghost: the first later one at or after `at` (boundaries passed under a ghost or inside accepted text are
    never asked); len(boundaries) when the typed part is over."""
    if at >= email.end:
        return len(email.boundaries)
    j = i + 1
    while j < len(email.boundaries) and email.boundaries[j].offset < at:
        j += 1
    return j


def first_asked(email: TypedEmail) -> int:
    """The first boundary the page asks at: the first inside the typed part."""
    return next_asked(email, -1, email.start)


def stretch(email: TypedEmail, weights: Mapping[str, float] | None, i: int, k: int) -> Stretch:
    """The `Stretch` of showing `k` words (k >= 1) of the proposal chosen at boundary `i` under `weights`,
    kept on the email (module doc: accepting and typing through)."""
    key = (weights_key(weights), i, k)
    found = email._stretches.get(key)
    if found is None:
        found = email._stretches[key] = _type_through(email, chosen(email, weights)[i], i, k)
    return found


def _type_through(email: TypedEmail, c: Choice | None, i: int, k: int) -> Stretch:
    assert c is not None and 1 <= k <= len(c.ends)
    text, end = email.text, email.end
    at = email.boundaries[i].offset
    ends: Sequence[int] | None = c.ends[:k]  # the ghost's word ends while it is whole
    ghost = c.text[:c.ends[k - 1]]  # what is left of the suggestion on screen
    wrong = not text.startswith(ghost[:c.ends[0]], at, end)
    if wrong:
        ends = None
    saved = keystrokes = accepted = through = 0
    while True:
        took, j = right_prefix(ghost, text, at, end, ends) if ghost[0] == text[at] else (0, 0)
        ends = None
        cost = 1 if took == len(ghost) else j  # Tab takes it all; Ctrl+Right one word at a time
        if took > cost:
            saved += took - cost
            keystrokes += cost
            accepted = 1
            at, ghost = at + took, ghost[took:]
        elif ghost[0] == text[at]:  # the writer types the next character by hand
            through += 1
            ghost = ghost[1:]
            at += 1
        else:
            ghost = ""
            at += 1
        if not ghost or at >= end:
            return Stretch(next_asked(email, i, at), saved, accepted, int(wrong), keystrokes, through)


def simulate(email: TypedEmail, rule: str, threshold: float | None,
             weights: Mapping[str, float] | None = None) -> Typing:
    """Type `email` with suggestions chosen by `weights` and shown by `rule` at `threshold` (module doc)."""
    out = Typing(email.chars, email.words)
    choices = chosen(email, weights)
    i = first_asked(email)
    while i < len(choices):
        c = choices[i]
        k = c.shown_words(rule, threshold) if c else 0
        if c is None or k == 0:  # nothing shown: the page asks again after the next character
            i = next_asked(email, i, email.boundaries[i].offset)
            continue
        s = stretch(email, weights, i, k)
        out.shown += 1
        out.wrong += s.wrong
        out.saved += s.saved
        out.keystrokes += s.keystrokes
        out.accepted += s.accepted
        out.typed_through += s.typed_through
        _bump(out.shown_by, c.source)
        if s.wrong:
            _bump(out.wrong_by, c.source)
        if s.saved:
            _bump(out.saved_by, c.source, s.saved)
        i = s.after
    return out
