"""The gate's rules (seqlab/generation/gate.py) against their formulas written out by hand."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from seqlab.generation.gate import CHARS_PER_WRONG, EXPECTED_CHARS, check_rule, kept_words, word_ends

TEXT = " the report is attached, thanks"


def _by_hand(text: str, confs: list[float], rule: str, threshold: float) -> int:
    ends = word_ends(text)[: len(confs)]
    values = [q * (end - 1) for q, end in zip(confs, ends)]
    best = max(range(len(values)), key=lambda k: (values[k], -k))
    need = threshold * (1 - confs[0]) if rule == CHARS_PER_WRONG else threshold
    return best + 1 if values[best] >= need else 0


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5), st.floats(0.0, 50.0),
       st.sampled_from([EXPECTED_CHARS, CHARS_PER_WRONG]))
def test_value_rules_show_the_best_prefix_when_it_pays(raw: list[float], threshold: float, rule: str) -> None:
    confs = sorted(raw, reverse=True)  # prefix probabilities never grow
    assert kept_words(TEXT, confs, rule, threshold) == _by_hand(TEXT, confs, rule, threshold)


def test_chars_per_wrong_asks_an_unsure_suggestion_to_save_more() -> None:
    """Two suggestions worth the same 5.5 expected characters: expected-chars decides them alike at any
    threshold; chars-per-wrong at 10 shows the surer one (wrong 31% of the time: it must save 3.1) and
    withholds the unsure one (wrong 75% of the time: it must save 7.5)."""
    unsure, sure = (" the report is attached", [0.25] * 4), (" attached", [0.6875])
    for t in (5.0, 6.0):
        assert bool(kept_words(*unsure, EXPECTED_CHARS, t)) == bool(kept_words(*sure, EXPECTED_CHARS, t))
    assert kept_words(*unsure, CHARS_PER_WRONG, 10.0) == 0
    assert kept_words(*sure, CHARS_PER_WRONG, 10.0) == 1
    assert kept_words(" the", [1.0], CHARS_PER_WRONG, 1e9) == 1  # a sure word passes any threshold
    check_rule(CHARS_PER_WRONG, 0.0)
