"""The threshold sweep types an email at every threshold at once: it must agree with `simulate` at each."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seqlab.evaluation.typing_sim import Boundary, Candidate, TypedEmail, simulate
from seqlab.evaluation.typing_sweep import sweep
from seqlab.generation.gate import CHARS_PER_WRONG, EXPECTED_CHARS, FIRST_WORD

WORDS = ["the", "meeting", "is", "at", "noon", "thanks", "a", ",", ".", "see", "you", "I", "x"]


@st.composite
def typed_emails(draw: st.DrawFn) -> TypedEmail:
    """An email with proposals at some of its offsets: copies of what follows (whole or cut short), other
    words, or nothing, from the model and sometimes the memory, with falling word confidences."""
    text = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=20)))
    end = draw(st.integers(1, len(text) - 1)) if len(text) > 1 else 0
    start = draw(st.integers(0, end))
    offsets = sorted(draw(st.sets(st.integers(0, len(text) - 1), max_size=len(text))))
    found = []
    for at in offsets:
        proposals = {}
        for source in ("model", "memory"):
            if source == "memory" and draw(st.booleans()):
                continue
            if draw(st.booleans()):
                shown = text[at:at + draw(st.integers(1, 30))]
                if draw(st.booleans()):
                    shown = " " + draw(st.sampled_from(WORDS)) + shown  # a wrong first word
            else:
                shown = " " + " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4)))
            confs = sorted(draw(st.lists(st.floats(0.0, 1.0), max_size=5)), reverse=True)
            proposals[source] = Candidate(shown, confs)
        found.append(Boundary(at, proposals))
    return TypedEmail(text, start, end, found)


THRESHOLDS = {FIRST_WORD: st.floats(0.0, 1.0), EXPECTED_CHARS: st.floats(0.0, 12.0),
              CHARS_PER_WRONG: st.floats(0.0, 40.0)}


@settings(max_examples=300, deadline=None)
@given(st.data(), typed_emails(), st.sampled_from(sorted(THRESHOLDS)),
       st.sampled_from([None, {"memory": 0.0}, {"memory": 0.5}, {"memory": 4.0}]))
def test_the_sweep_types_as_simulate_does_at_every_threshold(data: st.DataObject, email: TypedEmail, rule: str,
                                                              weights: dict[str, float] | None) -> None:
    thresholds = [0.0, *data.draw(st.lists(THRESHOLDS[rule], min_size=1, max_size=12))]
    saved, wrong = sweep(email, rule, thresholds, weights)
    each = [simulate(email, rule, t, weights) for t in thresholds]
    assert saved.tolist() == [t.saved for t in each]
    assert wrong.tolist() == [t.wrong for t in each]


def test_the_sweep_of_an_email_without_proposals_or_typed_part_is_zero() -> None:
    empty = TypedEmail("hello there", 3, 3, [Boundary(4, {"model": Candidate(" there", [0.9])})])
    none = TypedEmail("hello there", 0, 8, [])
    for email in (empty, none):
        saved, wrong = sweep(email, FIRST_WORD, [0.0, 0.5])
        assert not np.any(saved) and not np.any(wrong)
