"""Completion quality in the style of Gmail Smart Compose (Chen et al., 2019, "Gmail Smart Compose:
Real-Time Assisted Writing", KDD): ExactMatch@N at a coverage.

Positions are word boundaries inside held-out emails: just after a space that follows a word, with a
word (not a newline) next. A fixed, seeded set of them is drawn per email. At each position the model
sees the email so far and proposes up to `max_words` words (`seqlab.generation.complete.complete`, greedy, stopping
at a newline); the truth is the email's next words up to the end of the line.

- coverage: the fraction of positions where a proposal is shown, i.e. it is non-empty and its
  confidence (the first word's probability, see `seqlab.generation.complete`) is at least the threshold;
- ExactMatch@N: among shown proposals at positions whose true continuation has at least N words, the
  fraction whose first N words equal the true first N words (a shorter proposal is a miss). Words are
  compared exactly (case and punctuation included). None when no position qualifies.

Proposals are computed once with their confidence; any threshold is then a filter, so
`threshold_for_coverage` can find the threshold that shows a target fraction of positions and models can
be compared at equal coverage, and `coverage_table` reads ExactMatch at several coverages (5, 10, 20, 50
and 100% by default) from one set of proposals: the curve of what showing only the surest suggestions buys.

Two gates. The table above gates every suggestion on its first word, so EM@3 there asks: among the
positions whose FIRST word is surest, how often are the next three words right? Smart Compose instead shows
a suggestion when the whole phrase is sure enough (its beam score), so `phrase_coverage_table` also ranks
positions for EM@N by the probability of the proposal's first N words together
(`Completion.word_confidences`): one threshold per N, the same target coverages. `seqlab eval` prints both.

Uncertainty. Each ExactMatch is a proportion k/n over the n shown positions with enough true words, so it
comes with the Wilson score interval (Wilson 1927; Brown, Cai & DasGupta 2001 recommend it over the normal
approximation k/n +- 1.96 sqrt(p(1-p)/n), which collapses to zero width at 0 or n hits): at 95%,

    centre = (k + z^2/2) / (n + z^2),  half-width = z / (n + z^2) * sqrt(k (n - k) / n + z^2 / 4),  z = 1.96.

With 100 shown positions and 40 hits it is [31%, 50%]: a difference of a few points needs thousands of
positions, which is why `seqlab eval` draws 5 positions from each of 200 emails by default. The interval
treats positions as independent; positions of one email are not quite, so it is a little optimistic.
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
from seqlab.generation.gate import FIRST_WORD

_SPACE = " \t\n\r\f\v"


@dataclass
class Proposal:
    """One evaluated position: where, what the email really says next, and what the model proposed."""

    email: int
    offset: int  # character offset in the email text where the completion starts
    truth: list[str]  # the true next words up to the end of the line (at most max_words)
    words: list[str]  # the proposed words (empty: nothing proposed)
    confidence: float
    # P(first k proposed words) for k = 1..len(words) (`Completion.word_confidences`); empty: only the
    # first word's confidence is known, which then stands for every prefix
    word_confidences: list[float] = field(default_factory=list)

    def phrase_confidence(self, n: int) -> float | None:
        """The probability of the proposal's first n words as one phrase; None when it has fewer."""
        if len(self.words) < n:
            return None
        return self.word_confidences[n - 1] if len(self.word_confidences) >= n else self.confidence


def word_boundaries(text: str) -> list[int]:
    """Offsets i where text[i-1] is a space that follows a word and a word starts at text[i]."""
    return [i for i in range(2, len(text))
            if text[i - 1] == " " and text[i - 2] not in _SPACE and text[i] not in _SPACE]


def sample_positions(emails: Sequence[str], positions_per_email: int, seed: int) -> list[tuple[int, int]]:
    """(email index, offset) pairs: up to `positions_per_email` boundaries per email, drawn with `seed`."""
    if positions_per_email < 1:
        raise ValueError(f"positions_per_email must be at least 1, not {positions_per_email}")
    rng = random.Random(seed)
    picked = []
    for e, text in enumerate(emails):
        bounds = word_boundaries(text)
        picked += [(e, i) for i in sorted(rng.sample(bounds, min(positions_per_email, len(bounds))))]
    return picked


def collect_proposals(emails: Sequence[str], propose: Callable[..., Completion], *, max_words: int = 5,
                      positions_per_email: int = 2, seed: int = 0, contexts: Sequence[Any] | None = None
                      ) -> list[Proposal]:
    """Ask `propose(prefix)` at every sampled position (`propose(prefix, context)` with each email's
    context when `contexts` is given); `propose` must not apply a threshold itself."""
    out = []
    for e, i in sample_positions(emails, positions_per_email, seed):
        text = emails[e]
        truth = split_words(text[i:].split("\n", 1)[0])[:max_words]
        c = propose(text[:i]) if contexts is None else propose(text[:i], contexts[e])
        out.append(Proposal(e, i, truth, c.words[:max_words], c.confidence if c.words else 0.0,
                            c.word_confidences[:max_words]))
    return out


COVERAGES = (0.05, 0.1, 0.2, 0.5, 1.0)  # the coverages `seqlab eval` reports ExactMatch at
Z95 = 1.959963984540054  # the standard normal quantile of 0.975: two-sided 95% intervals


def wilson_interval(hits: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval of a proportion `hits`/`n` (see module doc); None when n is 0."""
    if not 0 <= hits <= n:
        raise ValueError(f"hits must be in [0, n], not {hits} of {n}")
    if n == 0:
        return None
    centre = (hits + z * z / 2) / (n + z * z)
    half = z / (n + z * z) * math.sqrt(hits * (n - hits) / n + z * z / 4)
    # at 0 or n hits one end is exactly 0 or 1; rounding would leave it a hair inside
    return (0.0 if hits == 0 else max(0.0, centre - half)), (1.0 if hits == n else min(1.0, centre + half))


def _shown(p: Proposal, threshold: float) -> bool:
    return bool(p.words) and p.confidence >= threshold


def score_proposals(proposals: Sequence[Proposal], threshold: float, max_words: int = 5) -> dict[str, Any]:
    """Coverage and ExactMatch@1..max_words of the proposals shown at `threshold` (see module doc)."""
    shown = [p for p in proposals if _shown(p, threshold)]
    exact: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    intervals: dict[str, list[float] | None] = {}
    for n in range(1, max_words + 1):
        eligible = [p for p in shown if len(p.truth) >= n]
        counts[str(n)] = len(eligible)
        hits = sum(p.words[:n] == p.truth[:n] for p in eligible)
        exact[str(n)] = hits / len(eligible) if eligible else None
        ci = wilson_interval(hits, len(eligible))
        intervals[str(n)] = list(ci) if ci is not None else None
    return {"threshold": threshold, "positions": len(proposals), "shown": len(shown),
            "coverage": len(shown) / len(proposals) if proposals else 0.0,
            "exact_match": exact, "exact_match_counts": counts, "exact_match_ci95": intervals}


def threshold_for_coverage(proposals: Sequence[Proposal], coverage: float) -> float:
    """The highest threshold that shows at least `coverage` of the positions (or, when that many
    proposals do not exist, the lowest confidence of a non-empty one: the largest coverage reachable)."""
    if not 0.0 < coverage <= 1.0:
        raise ValueError(f"coverage must be in (0, 1], not {coverage}")
    return _threshold([p.confidence for p in proposals if p.words], len(proposals), coverage)


def _threshold(confidences: list[float], positions: int, coverage: float) -> float:
    """The highest threshold at which at least `coverage` of `positions` have a confidence that reaches it
    (or the lowest confidence, when fewer than that many exist); 0 when there is none."""
    confs = sorted(confidences, reverse=True)
    if not confs:
        return 0.0
    k = max(1, math.ceil(coverage * positions - 1e-9))  # positions that must be shown
    return confs[min(k, len(confs)) - 1]


def coverage_table(proposals: Sequence[Proposal], coverages: Sequence[float] = COVERAGES,
                   max_words: int = 5) -> list[dict[str, Any]]:
    """For each target coverage: {"target", "threshold", "coverage", "exact_match", ...} as `score_proposals`
    gives at the threshold that reaches it (`threshold_for_coverage`)."""
    return [{"target": c, **score_proposals(proposals, threshold_for_coverage(proposals, c), max_words)}
            for c in coverages]


def phrase_coverage_table(proposals: Sequence[Proposal], coverages: Sequence[float] = COVERAGES,
                          max_words: int = 5) -> list[dict[str, Any]]:
    """ExactMatch@N at each target coverage when an N-word suggestion is shown only if ITS probability (all
    N words as one phrase) reaches the threshold, as Smart Compose gates a suggestion on its beam score:
    one threshold per N. Positions are ranked by P(first N words) instead of by the first word alone.

    Rows: {"target", and per N (keys "1".."max_words"): "threshold", "coverage", "shown", "exact_match",
    "exact_match_counts", "exact_match_ci95"}. EM@N counts, as `score_proposals` does, the shown
    positions whose truth has at least N words."""
    rows = []
    for c in coverages:
        if not 0.0 < c <= 1.0:
            raise ValueError(f"coverage must be in (0, 1], not {c}")
        row: dict[str, Any] = {"target": c, "positions": len(proposals)}
        for key in ("threshold", "coverage", "shown", "exact_match", "exact_match_counts", "exact_match_ci95"):
            row[key] = {}
        for n in range(1, max_words + 1):
            gated = [(p, q) for p in proposals if (q := p.phrase_confidence(n)) is not None]
            t = _threshold([q for _, q in gated], len(proposals), c)
            shown = [p for p, q in gated if q >= t] if gated else []
            eligible = [p for p in shown if len(p.truth) >= n]
            hits = sum(p.words[:n] == p.truth[:n] for p in eligible)
            ci = wilson_interval(hits, len(eligible))
            k = str(n)
            row["threshold"][k], row["shown"][k] = t, len(shown)
            row["coverage"][k] = len(shown) / len(proposals) if proposals else 0.0
            row["exact_match"][k] = hits / len(eligible) if eligible else None
            row["exact_match_counts"][k] = len(eligible)
            row["exact_match_ci95"][k] = list(ci) if ci is not None else None
        rows.append(row)
    return rows


def completion_quality(model: nn.Module, tokenizer: Tokenizer, emails: Sequence[str], *, max_words: int = 5,
                       threshold: float = 0.0, positions_per_email: int = 2, seed: int = 0,
                       target_coverage: float | None = None, coverages: Sequence[float] = (),
                       phrases: Any = None, contexts: Sequence[Any] | None = None) -> dict[str, Any]:
    """Greedy proposals of `model` at sampled word boundaries of `emails`, scored at `threshold`.

    With `target_coverage`, also the threshold that reaches it and the scores there, under "at_coverage";
    with `coverages`, the same for each under "by_coverage" (`coverage_table`). `phrases` (a
    `seqlab.generation.phrases.PhraseBlend`) blends a person's phrase model into every proposal.
    `contexts`: one per email (a ContextBatch or None), read by a model with cross-attention.
    The model stays on its own device.
    """
    def propose(prefix: str, context: Any = None) -> Completion:
        # ungated: every threshold is applied afterwards, on the first word's probability
        return complete(model, tokenizer, prefix, max_words=max_words, temperature=0.0, phrases=phrases,
                        context=context, rule=FIRST_WORD)

    proposals = collect_proposals(emails, propose, max_words=max_words,
                                  positions_per_email=positions_per_email, seed=seed, contexts=contexts)
    result = score_proposals(proposals, threshold, max_words)
    if target_coverage is not None:
        t = threshold_for_coverage(proposals, target_coverage)
        result["at_coverage"] = {"target": target_coverage, **score_proposals(proposals, t, max_words)}
    if coverages:
        result["by_coverage"] = coverage_table(proposals, coverages, max_words)
        result["by_coverage_phrase"] = phrase_coverage_table(proposals, coverages, max_words)
    return result
