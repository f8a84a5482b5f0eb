"""One suggestion from several proposers: the model, the person's memory, the message being answered.

Each proposer gives a `Completion` (or None) for the same prompt. Their confidences are not on one scale:
the model's are its probabilities, a memory's are shares of agreeing earlier places. A blend weight per
source (fitted on the person's own held-out mail; 1.0 until then) rescales a non-model source's
`word_confidences` (capped at 1), and the proposal worth the most expected saved characters wins: the
best prefix value of `seqlab.generation.gate.prefix_values`, value_k = P(first k words) * (chars_k - 1).
The winner is then gated by the served rule and threshold as a model suggestion is. This is the choice
the saved-characters evaluation replays, so a weight and a threshold fitted there mean the same here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from seqlab.generation.complete import Completion
from seqlab.generation.gate import kept_words, prefix_values, word_ends

MODEL = "model"  # the network's source name (Completion.source)


def weighted(c: Completion, weights: Mapping[str, float]) -> Completion:
    """`c` with its word confidences times its source's weight (capped at 1; a source not named weighs 1)."""
    w = weights.get(c.source, 1.0)
    if w == 1.0:
        return c
    scaled = [min(1.0, q * w) for q in c.word_confidences]
    return replace(c, word_confidences=scaled, confidence=scaled[0] if scaled else 0.0)


def best_value(c: Completion) -> float:
    """The largest expected saved characters of any prefix of `c` (0 for an empty one)."""
    return max(prefix_values(c.text, c.word_confidences), default=0.0) if c.text else 0.0


def choose(proposals: Iterable[Completion | None], weights: Mapping[str, float]) -> Completion | None:
    """The proposal (weighted) worth the most expected saved characters, the earlier one on ties (list the
    model first); None when no source proposed a word, or every one that did weighs 0. The same choice as
    the saved-characters replay's (`seqlab.evaluation.typing_sim.choose`)."""
    best, value = None, -1.0
    for c in proposals:
        if c is None or not c.word_confidences or weights.get(c.source, 1.0) <= 0:
            continue
        w = weighted(c, weights)
        v = best_value(w)
        if v > value:
            best, value = w, v
    return best


def gate(c: Completion, rule: str, threshold: float | None) -> Completion:
    """`c` cut to the words the rule shows (`gate.kept_words`), or emptied (text '') when withheld; a cut
    suggestion keeps no token ids (they were the whole one's)."""
    shown = kept_words(c.text, c.word_confidences, rule, threshold)
    if shown == 0:
        return replace(c, text="", ids=[], word_confidences=[])
    if shown == len(c.word_confidences):
        return c
    end = word_ends(c.text)[shown - 1]
    return replace(c, text=c.text[:end], ids=[], word_confidences=c.word_confidences[:shown])
