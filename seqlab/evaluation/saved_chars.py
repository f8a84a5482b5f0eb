"""Saved characters, the product metric: how much typing the suggestions would have saved a writer.

Whole emails are typed, not sampled positions. ExactMatch's sampled positions (`exact_match.py`) are
independent draws, but what a suggestion saves depends on where the writer is: a suggestion taken skips
the positions inside it, and one on screen is typed through rather than asked again. So each held-out
email's body (its first `words` words; the subject is in the prompt, as the compose page sends it, but
not typed) is typed by a simulated writer, left to right, exactly as `seqlab/serving/static/compose.js`
behaves (`typing_sim`: which proposal is shown, Tab and Ctrl+Right, typing through a ghost).

Where suggestions are asked for (`ask`):

- "every-letter" (the default): after every typed character of the body, as the page asks at every
  keystroke; not while the body is still empty or only whitespace (the page does not ask then);
- "word-starts": only where a word starts after whitespace, past the body's first word (the counting of
  earlier measurements, kept for comparison); `mid_word` k > 0 also asks k letters into each word.

A greedy proposal depends only on the text before it, so the positions of every email are known before
typing, and the proposals at all of them are made in one call (`collect_typing` takes a proposer of many
emails' positions at once), unthresholded, with one proposal per source (the model always, and each extra
proposer that answers: the person's memory, the message being answered). Any rule, threshold and source
weights are then a replay over them (`saved_fit`: `score_typing`, the trade-off curve, `best_threshold`,
the joint fit `fit_setting`): no more model calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

from seqlab.data.tokenizer import Tokenizer
from seqlab.evaluation.saved_fit import (  # noqa: F401  (re-exported: the module callers know)
    BOOTSTRAP,
    CURVE_THRESHOLDS,
    MAX_WRONG_PER_100,
    WEIGHT_GRID,
    best_threshold,
    bootstrap_interval,
    candidate_thresholds,
    fit_setting,
    score_typing,
    tradeoff_curve,
)
from seqlab.evaluation.typing_sim import (  # noqa: F401
    MODEL,
    Boundary,
    Candidate,
    TypedEmail,
    Typing,
    accepted_chars,
    simulate,
)
from seqlab.generation.batched import propose_positions
from seqlab.generation.complete import MAX_SENTENCE_WORDS, Completion, complete
from seqlab.generation.gate import FIRST_WORD, RULES, word_ends

EVERY_LETTER = "every-letter"
WORD_STARTS = "word-starts"
ASK_MODES = (EVERY_LETTER, WORD_STARTS)
DEFAULT_ASK = EVERY_LETTER

_SPACE = " \t\n\r\f\v"

# (texts, positions per text, contexts or None) -> for each text, the model's Completion at each position
ModelProposer = Callable[[Sequence[str], Sequence[Sequence[int]], Sequence[Any] | None], list[list[Completion]]]
# (prompt, context) -> a Completion from one more source (its `source` names it), or None
Proposer = Callable[[str, Any], Completion | None]


def typed_span(text: str, words: int) -> tuple[int, int]:
    """[start, end) of the part of an email a writer types: its body (after the subject's blank line),
    up to the end of its `words`-th word."""
    cut = text.find("\n\n")
    start = cut + 2 if cut >= 0 else 0
    ends = word_ends(text[start:])
    end = start + (ends[words - 1] if len(ends) >= words else len(text) - start)
    return start, end


def boundaries(text: str, start: int, end: int, mid_word: int = 0) -> list[int]:
    """Word starts: offsets i in (start, end) where text[i-1] is whitespace, text[i] is not, and a word was
    typed before; with `mid_word` k > 0 also k characters into each word that goes on after them (the
    writer typed its first k letters), the body's first word included."""
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


def check_ask(ask: str, mid_word: int = 0) -> None:
    """A `ValueError` naming the problem when `ask` is unknown or `mid_word` does not apply."""
    if ask not in ASK_MODES:
        raise ValueError(f"where suggestions are asked must be one of {', '.join(ASK_MODES)}, not {ask!r}")
    if mid_word < 0 or (mid_word > 0 and ask != WORD_STARTS):
        raise ValueError(f"mid-word asking (k letters into each word, k >= 1) adds to {WORD_STARTS} only; "
                         f"got mid_word={mid_word} with {ask}")


def ask_positions(text: str, start: int, end: int, ask: str = DEFAULT_ASK, mid_word: int = 0) -> list[int]:
    """The offsets in (start, end) where the page asks for a suggestion (module doc)."""
    check_ask(ask, mid_word)
    if ask == WORD_STARTS:
        return boundaries(text, start, end, mid_word)
    first = next((i for i in range(start, end) if text[i] not in _SPACE), end)  # the body's first letter
    return list(range(first + 1, end))


def one_by_one(propose: Callable[[str, Any], Completion]) -> ModelProposer:
    """A `ModelProposer` that calls `propose(prompt, context)` at each position in turn."""
    def proposals(texts: Sequence[str], positions: Sequence[Sequence[int]],
                  contexts: Sequence[Any] | None) -> list[list[Completion]]:
        return [[propose(text[:i], contexts[e] if contexts is not None else None) for i in where]
                for e, (text, where) in enumerate(zip(texts, positions))]

    return proposals


def _candidates(model: Completion, prompt: str, context: Any, proposers: Sequence[Proposer]) -> dict[str, Candidate]:
    out = {MODEL: Candidate.of(model)}
    for propose in proposers:
        c = propose(prompt, context)
        if c is None or not c.text:
            continue
        if c.source in out:
            raise ValueError(f"two proposals for source {c.source!r} at one position: each extra proposer "
                             f"must name a source of its own (not {MODEL!r})")
        out[c.source] = Candidate.of(c)
    return out


def collect_typing(emails: Sequence[str], propose_all: ModelProposer, *, words: int = 50,
                   contexts: Sequence[Any] | None = None, ask: str = DEFAULT_ASK, mid_word: int = 0,
                   proposers: Sequence[Proposer] = ()) -> list[TypedEmail]:
    """Each email's typed part with the proposals at its asked positions (`ask_positions`): the model's
    from ONE call of `propose_all` over all emails (it must apply no threshold: the rules are replayed),
    and each of `proposers`' that answers (`proposers` are asked position by position)."""
    if words < 1:
        raise ValueError(f"words per email must be at least 1, not {words}")
    if contexts is not None and len(contexts) != len(emails):
        raise ValueError(f"contexts must give one per email: {len(contexts)} for {len(emails)} emails")
    spans = [typed_span(text, words) for text in emails]
    positions = [ask_positions(text, s, e, ask, mid_word) for text, (s, e) in zip(emails, spans)]
    answers = propose_all(emails, positions, contexts)
    out = []
    for e, (text, (start, end)) in enumerate(zip(emails, spans)):
        ctx = contexts[e] if contexts is not None else None
        found = [Boundary(i, _candidates(c, text[:i], ctx, proposers)) for i, c in zip(positions[e], answers[e])]
        out.append(TypedEmail(text, start, end, found))
    return out


def with_source(typed: Sequence[TypedEmail], source: str, propose: Callable[[int, str], Completion | None]
                ) -> list[TypedEmail]:
    """A copy of `typed` with `source`'s proposal `propose(email index, prompt)` added at every asked position:
    a source that does not read the model (the person's memory, the message answered) is added to proposals
    kept from an earlier typing without typing again."""
    out = []
    for e, email in enumerate(typed):
        found = []
        for b in email.boundaries:
            proposals = dict(b.proposals)
            c = propose(e, email.text[:b.offset])
            if c is not None and c.text:
                proposals[source] = Candidate.of(c)
            found.append(Boundary(b.offset, proposals))
        out.append(TypedEmail(email.text, email.start, email.end, found))
    return out


def model_proposer(model: nn.Module, tokenizer: Tokenizer, *, max_words: int = 3, phrases: Any = None,
                   sentence: bool = False) -> ModelProposer:
    """`model`'s greedy, unthresholded proposals of up to `max_words` words (with `sentence`, up to the end
    of the sentence, `max_words` a cap): what `complete` returns at each position, made for all emails at
    once by `seqlab.generation.batched.propose_positions` (prefix reuse and lanes); blended with `phrases`
    when given, through `complete` one position at a time."""
    if phrases is not None:
        def propose(prompt: str, context: Any) -> Completion:
            return complete(model, tokenizer, prompt, max_words=max_words, temperature=0.0, phrases=phrases,
                            context=context, rule=FIRST_WORD, sentence=sentence)

        return one_by_one(propose)

    def proposals(texts: Sequence[str], positions: Sequence[Sequence[int]],
                  contexts: Sequence[Any] | None) -> list[list[Completion]]:
        return propose_positions(model, tokenizer, texts, positions, max_words=max_words, contexts=contexts,
                                 sentence=sentence)

    return proposals


def type_emails(model: nn.Module, tokenizer: Tokenizer, emails: Sequence[str], *, words: int = 50,
                max_words: int = MAX_SENTENCE_WORDS, phrases: Any = None, contexts: Sequence[Any] | None = None,
                ask: str = DEFAULT_ASK, mid_word: int = 0, proposers: Sequence[Proposer] = (),
                sentence: bool = True) -> list[TypedEmail]:
    """`collect_typing` with `model`'s proposals (`model_proposer`): by default as the compose page asks,
    to the end of the sentence or line with `max_words` a cap (`sentence=False`: exactly up to
    `max_words` words, the earlier counting), reading each email's context when given, and the extra
    `proposers`."""
    return collect_typing(emails, model_proposer(model, tokenizer, max_words=max_words, phrases=phrases,
                                                 sentence=sentence),
                          words=words, contexts=contexts, ask=ask, mid_word=mid_word, proposers=proposers)


def saved_report(typed: Sequence[TypedEmail], rule: str, threshold: float | None,
                 max_wrong_per_100: float = MAX_WRONG_PER_100, *, weights: dict[str, float] | None = None
                 ) -> dict[str, Any]:
    """What `seqlab eval` reports: the saved share at `rule`/`threshold` (the served setting), and for each
    rule the best threshold on these emails under the cap (`best_threshold`: chosen on the split it is
    scored on, so an optimistic reading; `seqlab calibrate --target saved` chooses it on val)."""
    return {"at": score_typing(typed, rule, threshold, weights=weights),
            "best": [best_threshold(typed, r, max_wrong_per_100, weights=weights) for r in RULES]}
