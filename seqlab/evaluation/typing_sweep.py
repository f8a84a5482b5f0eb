"""The simulated writer (`typing_sim.simulate`) at many thresholds at once, for fitting a threshold.

A fit tries about 200 thresholds at each blend weight (`saved_fit.candidate_thresholds`); typing every email
once per threshold repeats the same work, since what follows a suggestion shown at a boundary (`Stretch`)
depends on neither the rule nor the threshold. Here each email is walked once for all thresholds together:

- the words shown at each boundary under each threshold, K[b, t], from the gate's own comparisons done on
  arrays (`Choice.shown_words`: a first word's probability against the threshold, or the best prefix's value
  against it under the value rules);
- for each threshold, the next boundary with something shown, NEXT[b, t] (boundaries where nothing is shown
  are passed one by one, as the page asks after each typed character);
- then every threshold's writer steps from shown suggestion to shown suggestion together, each step one
  `Stretch` looked up in arrays (typed once per boundary and words shown, kept on the email) and added.

So the cost is one `Stretch` per suggestion any threshold shows, plus array work per step, instead of a
character-level walk per threshold. `sweep` gives what `simulate` gives for the saved characters and the
wrong suggestions (the tests compare the two at every threshold).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from seqlab.evaluation.typing_sim import TypedEmail, chosen, first_asked, simulate, stretch
from seqlab.generation.gate import CHARS_PER_WRONG, FIRST_WORD, check_rule


def shown_words(email: TypedEmail, rule: str, thresholds: np.ndarray,
                weights: Mapping[str, float] | None) -> np.ndarray:
    """K[b, t]: the words shown at boundary b under thresholds[t] (`Choice.shown_words` for each), int64."""
    choices = chosen(email, weights)
    k = np.zeros((len(choices), len(thresholds)), dtype=np.int64)
    for b, c in enumerate(choices):
        if c is None:
            continue
        if rule == FIRST_WORD:  # the words whose cumulative probability reaches the threshold
            confs = np.asarray(c.word_confidences[: len(c.ends)], dtype=np.float64)
            k[b] = (confs[:, None] >= thresholds[None, :]).sum(axis=0)
        elif c.best_lettered:
            first = c.word_confidences[0]
            bar = thresholds * (1.0 - first) if rule == CHARS_PER_WRONG else thresholds
            k[b] = np.where(c.best_value >= bar, c.best + 1, 0)
    return k


def _in_order(email: TypedEmail) -> bool:
    """Whether the boundaries' offsets strictly increase (as every collected typing's do): then nothing shown
    at boundary b means the page asks at b + 1 next, while b is inside the typed part."""
    offsets = [b.offset for b in email.boundaries]
    return all(a < b for a, b in zip(offsets, offsets[1:]))


def sweep(email: TypedEmail, rule: str, thresholds: Sequence[float],
          weights: Mapping[str, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(saved characters, wrong suggestions) of `simulate(email, rule, t, weights)` for each t of `thresholds`
    (module doc), as int64 arrays."""
    for t in thresholds:
        check_rule(rule, t)
    ts = np.asarray(thresholds, dtype=np.float64)
    saved = np.zeros(len(ts), dtype=np.int64)
    wrong = np.zeros(len(ts), dtype=np.int64)
    if not _in_order(email):  # not what collection makes; typed one threshold at a time
        for j, t in enumerate(thresholds):
            got = simulate(email, rule, t, weights)
            saved[j], wrong[j] = got.saved, got.wrong
        return saved, wrong
    n = len(email.boundaries)
    # the last boundary the page can ask at when nothing is shown before it: the first at or past the end
    last = next((b for b, x in enumerate(email.boundaries) if x.offset >= email.end), n - 1)
    k = shown_words(email, rule, ts, weights)
    k[last + 1:] = 0
    # NEXT[b, t]: the first boundary at or after b with something shown under thresholds[t]; n when none
    # (row n is that sentinel, so a stretch that ends the email indexes it)
    rows = np.where(k > 0, np.arange(n)[:, None], n)
    nxt = np.vstack([np.minimum.accumulate(rows[::-1], axis=0)[::-1], np.full((1, len(ts)), n)])
    # what follows a suggestion at (boundary, words shown), filled in as the walks first need it (after = -1:
    # not yet typed)
    width = int(k.max(initial=0)) + 1
    after = np.full((n, width), -1, dtype=np.int64)
    gain, missed = np.zeros((n, width), dtype=np.int64), np.zeros((n, width), dtype=np.int64)
    lanes = np.arange(len(ts))
    at = nxt[min(first_asked(email), n), lanes]
    while True:
        live = at < n
        if not live.any():
            return saved, wrong
        lanes, at = lanes[live], at[live]
        words = k[at, lanes]
        new = after[at, words] < 0
        for b, w in set(zip(at[new].tolist(), words[new].tolist())):
            s = stretch(email, weights, b, w)
            after[b, w], gain[b, w], missed[b, w] = s.after, s.saved, s.wrong
        saved[lanes] += gain[at, words]  # each lane once per step: no repeated index
        wrong[lanes] += missed[at, words]
        at = nxt[after[at, words], lanes]
