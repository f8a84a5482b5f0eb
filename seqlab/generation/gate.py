"""When a suggestion is worth showing, and how many of its words: the three rules of `complete`'s threshold.

A greedy completion comes with the probability of each of its prefixes as a phrase,
`Completion.word_confidences` = [P(w1), P(w1 w2), ...] (non-increasing). A rule turns those and the
suggestion's text into the number of words to show, 0 meaning "withhold it":

- `first-word` (the original rule): show the suggestion when P(w1) >= threshold (a probability), and keep
  the words whose prefix probability still reaches it. A lone "," counts as much as "outsource suppliers".
- `expected-chars`: a suggestion is worth what it saves. Showing its first k words saves,
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
- `chars-per-wrong` (the default): the same prefix (the largest value_k), shown when what it is expected
  to save pays for the chance that it is a wrong suggestion:

      value_k >= threshold * (1 - P(w1))             threshold: characters saved per wrong suggestion

  A shown suggestion is wrong exactly when its first word is (`seqlab.evaluation.typing_sim`), so over
  the suggestions shown, expected saved characters sum the value_k and expected wrong suggestions the
  1 - P(w1). Saving the most characters for a given number of wrong suggestions is a knapsack whose
  Lagrangian relaxation shows each suggestion whose saving per expected wrong one reaches the multiplier
  (Everett 1963): this rule, with the threshold as the multiplier. `expected-chars` ignores the cost
  and shows a long unsure suggestion (P(w1) = 0.25 of 60 characters is worth 15) that is wrong three
  times in four; this rule asks it to save 3x the threshold. A sure one (P(w1) near 1) always passes.

`docs/suggestions.md` has the measured trade-off between the rules (saved characters against wrong
suggestions shown) and why `chars-per-wrong` is the default.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

FIRST_WORD = "first-word"
EXPECTED_CHARS = "expected-chars"
CHARS_PER_WRONG = "chars-per-wrong"
RULES = (FIRST_WORD, EXPECTED_CHARS, CHARS_PER_WRONG)
VALUE_RULES = (EXPECTED_CHARS, CHARS_PER_WRONG)  # the rules that show the prefix of the largest value_k
DEFAULT_RULE = CHARS_PER_WRONG

_WORD = re.compile(r"[^ \t\n\r\f\v]+")


def check_rule(rule: str, threshold: float | None) -> None:
    """A `ValueError` naming the problem when `rule` is unknown or `threshold` is out of its range
    ([0, 1] for a probability, >= 0 characters for the other rules)."""
    if rule not in RULES:
        raise ValueError(f"the suggestion rule must be one of {', '.join(RULES)}, not {rule!r}")
    if threshold is None:
        return
    if rule == FIRST_WORD and not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], not {threshold}")
    if rule in VALUE_RULES and not 0.0 <= threshold < float("inf"):
        raise ValueError(f"the {rule} threshold must be 0 or more characters, not {threshold}")


def value_passes(value: float, first_word: float, rule: str, threshold: float) -> bool:
    """Whether the best prefix, worth `value` characters with a first word of probability `first_word`,
    reaches `threshold` under `rule` (one of VALUE_RULES; module doc)."""
    if rule == CHARS_PER_WRONG:
        return value >= threshold * (1.0 - first_word)
    return value >= threshold


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
    if not value_passes(values[best], word_confidences[0], rule, threshold):
        return 0
    return best + 1
