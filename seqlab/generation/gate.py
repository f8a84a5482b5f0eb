"""When a suggestion is worth showing, and how many of its words: the two rules of `complete`'s threshold.

A greedy completion comes with the probability of each of its prefixes as a phrase,
`Completion.word_confidences` = [P(w1), P(w1 w2), ...] (non-increasing). A rule turns those and the
suggestion's text into the number of words to show, 0 meaning "withhold it":

- `first-word` (the original rule): show the suggestion when P(w1) >= threshold (a probability), and keep
  the words whose prefix probability still reaches it. A lone "," counts as much as "outsource suppliers".
- `expected-chars` (the default): a suggestion is worth what it saves. Showing its first k words saves,
  when all k are right, the characters up to the end of word k minus the one keystroke that accepts it;
  the rule scores that prefix by

      value_k = P(w1 .. wk) * (chars_k - 1)          chars_k: characters of the text up to the end of word k

  keeps the k with the largest value (the shortest on ties) and shows it when value_k >= threshold (in
  characters). value_k is a lower bound of the saving expected from showing k words when the writer
  accepts up to the first wrong word (`seqlab.evaluation.saved_chars`): a partly right suggestion saves
  something too. This is Smart Compose's "expected benefit" idea (Chen et al. 2019, section 5.3 ranks
  by score and length) reduced to the one quantity the product metric counts. A prefix with no letter or
  digit ("." or ", -") is never shown under this rule: it saves at most a keystroke and costs the
  writer a look.

`docs/suggestions.md` has the measured trade-off between the rules (saved characters against wrong
suggestions shown) and why `expected-chars` is the default.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

FIRST_WORD = "first-word"
EXPECTED_CHARS = "expected-chars"
RULES = (FIRST_WORD, EXPECTED_CHARS)
DEFAULT_RULE = EXPECTED_CHARS

_WORD = re.compile(r"[^ \t\n\r\f\v]+")


def check_rule(rule: str, threshold: float | None) -> None:
    """A `ValueError` naming the problem when `rule` is unknown or `threshold` is out of its range
    ([0, 1] for a probability, >= 0 characters for expected-chars)."""
    if rule not in RULES:
        raise ValueError(f"the suggestion rule must be one of {', '.join(RULES)}, not {rule!r}")
    if threshold is None:
        return
    if rule == FIRST_WORD and not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], not {threshold}")
    if rule == EXPECTED_CHARS and not 0.0 <= threshold < float("inf"):
        raise ValueError(f"the expected-characters threshold must be 0 or more, not {threshold}")


def word_ends(text: str) -> list[int]:
    """Character offset where each word of `text` ends (words as `split_words` counts them)."""
    return [m.end() for m in _WORD.finditer(text)]


def has_word_character(text: str) -> bool:
    """Whether `text` holds a letter or digit: a suggestion without one is lone punctuation."""
    return any(ch.isalnum() for ch in text)


def prefix_values(text: str, word_confidences: Sequence[float]) -> list[float]:
    """value_k = P(first k words) * (chars_k - 1) for each prefix (see module doc); a prefix without a
    letter or digit is worth 0."""
    ends = word_ends(text)
    return [q * (end - 1) if has_word_character(text[:end]) else 0.0
            for q, end in zip(word_confidences, ends)]


def kept_words(text: str, word_confidences: Sequence[float], rule: str, threshold: float | None) -> int:
    """How many words of a suggestion (`text`, with its prefix probabilities) to show; 0 withholds it.

    Without a threshold there is no gate: every word is kept (under `expected-chars`, unless the whole
    suggestion is lone punctuation), as `seqlab complete` shows a suggestion when asked for no threshold."""
    n = min(len(word_confidences), len(word_ends(text)))
    if n == 0:
        return 0
    if rule == FIRST_WORD:
        if threshold is None:
            return n
        return sum(q >= threshold for q in word_confidences[:n])  # non-increasing: the sure words lead
    if threshold is None:
        return n if has_word_character(text[: word_ends(text)[n - 1]]) else 0
    values = prefix_values(text, word_confidences[:n])
    best = max(range(n), key=lambda k: (values[k], -k))
    if not has_word_character(text[: word_ends(text)[best]]):
        return 0
    if values[best] < threshold:
        return 0
    return best + 1
