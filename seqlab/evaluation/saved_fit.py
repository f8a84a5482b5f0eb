"""Scoring typed emails and fitting the served setting: saved share, wrong suggestions, thresholds, weights.

Every figure is a replay of `typing_sim.simulate` over the proposals kept at collection time, so a
threshold sweep, the trade-off curve and a joint fit of (threshold, blend weights) cost no model call.

    saved share = sum over emails of saved characters / sum over emails of characters typed without help
    wrong per 100 words = 100 * wrong suggestions shown / words typed

Each is a ratio of sums over emails, so its 95% interval is a percentile bootstrap over emails
(`seqlab.evaluation.bootstrap`): emails resampled with replacement `BOOTSTRAP` times with a fixed seed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from seqlab.evaluation.bootstrap import BOOTSTRAP, draws, interval, quantiles, ratios
from seqlab.evaluation.typing_sim import MODEL, TypedEmail, Typing, chosen, simulate
from seqlab.evaluation.typing_sweep import sweep
from seqlab.generation.gate import CHARS_PER_WRONG, DEFAULT_RULE, EXPECTED_CHARS, FIRST_WORD, RULES, check_rule

# the grids the trade-off curve is drawn at: a first word's probability, and expected saved characters
CURVE_THRESHOLDS = {
    FIRST_WORD: (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95),
    EXPECTED_CHARS: (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0),
    CHARS_PER_WRONG: (0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 24.0, 32.0, 48.0, 64.0),
}
MAX_WRONG_PER_100 = 3.0  # the cap `best_threshold` keeps to by default: a wrong suggestion at most once per 33 words
# the weights `fit_setting` tries for each source other than the model (multiplying its word confidences)
WEIGHT_GRID = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)


def _ratio(parts: Sequence[Typing], top: str, bottom: str, scale: float) -> float | None:
    den = sum(getattr(t, bottom) for t in parts)
    return scale * sum(getattr(t, top) for t in parts) / den if den else None


def bootstrap_interval(parts: Sequence[Typing], top: str, bottom: str, scale: float = 1.0,
                       resamples: int = BOOTSTRAP, seed: int = 0) -> list[float] | None:
    """95% percentile interval of scale * sum(top) / sum(bottom) over emails resampled with replacement."""
    picks = draws(len(parts), resamples, seed)
    return interval(ratios([getattr(t, top) for t in parts], [getattr(t, bottom) for t in parts], picks, scale))


def _by_source(parts: Sequence[Typing], name: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in parts:
        for source, n in getattr(t, name).items():
            out[source] = out.get(source, 0) + n
    return dict(sorted(out.items()))


def score_typing(typed: Sequence[TypedEmail], rule: str, threshold: float | None, *,
                 weights: Mapping[str, float] | None = None, intervals: bool = True,
                 seed: int = 0) -> dict[str, Any]:
    """The saved share and wrong suggestions per 100 words of `typed` under one rule, threshold and
    source weights, with totals, per-source counts ("saved_by_source": each source's share of the saved
    characters), characters typed through a ghost, and (with `intervals`) 95% bootstrap intervals."""
    check_rule(rule, threshold)
    parts = [simulate(e, rule, threshold, weights) for e in typed]
    saved = sum(t.saved for t in parts)
    by_source = _by_source(parts, "saved_by")
    row: dict[str, Any] = {
        "rule": rule, "threshold": threshold, "weights": dict(weights or {}), "emails": len(parts),
        "chars": sum(t.chars for t in parts), "words": sum(t.words for t in parts),
        "saved_chars": saved, "shown": sum(t.shown for t in parts),
        "accepted": sum(t.accepted for t in parts), "wrong": sum(t.wrong for t in parts),
        "keystrokes": sum(t.keystrokes for t in parts), "typed_through": sum(t.typed_through for t in parts),
        "saved": _ratio(parts, "saved", "chars", 1.0), "wrong_per_100_words": _ratio(parts, "wrong", "words", 100.0),
        "saved_chars_by_source": by_source,
        "saved_by_source": {s: n / saved for s, n in by_source.items()} if saved else {},
        "shown_by_source": _by_source(parts, "shown_by"), "wrong_by_source": _by_source(parts, "wrong_by"),
    }
    if intervals:
        row["saved_ci95"] = bootstrap_interval(parts, "saved", "chars", seed=seed)
        row["wrong_per_100_words_ci95"] = bootstrap_interval(parts, "wrong", "words", 100.0, seed=seed)
    return row


def tradeoff_curve(typed: Sequence[TypedEmail], rules: Sequence[str] = RULES,
                   thresholds: dict[str, Sequence[float]] | None = None, *,
                   weights: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
    """`score_typing` rows (no intervals) for each rule at each of its thresholds (`CURVE_THRESHOLDS`)."""
    grid = thresholds or CURVE_THRESHOLDS
    return [score_typing(typed, rule, t, weights=weights, intervals=False) for rule in rules for t in grid[rule]]


def candidate_thresholds(typed: Sequence[TypedEmail], rule: str, count: int = 200, *,
                         weights: Mapping[str, float] | None = None) -> list[float]:
    """Up to `count` thresholds spread over the quantiles of what the rule compares at each position (the
    chosen proposal's first-word probability, its best prefix's expected saved characters, or those per
    chance of a wrong first word), 0, and one just above the largest (nothing shown but what is sure)."""
    values = []
    for e in typed:
        for c in chosen(e, weights):
            if c is None:
                continue
            if rule == FIRST_WORD:
                values.append(c.word_confidences[0])
            elif rule == EXPECTED_CHARS:
                values.append(c.best_value)
            elif c.word_confidences[0] < 1.0:  # a sure first word passes every threshold
                values.append(c.best_value / (1.0 - c.word_confidences[0]))
    values.sort()
    if not values:
        return [0.0]
    picks = {values[int(q * (len(values) - 1) / max(1, count - 1))] for q in range(count)}
    above = math.nextafter(values[-1], math.inf)  # shows nothing: within any cap
    if rule != FIRST_WORD or above <= 1.0:
        picks.add(above)
    return sorted(picks | {0.0})


def _check(rule: str, max_wrong_per_100: float) -> None:
    if rule not in RULES:
        raise ValueError(f"the suggestion rule must be one of {', '.join(RULES)}, not {rule!r}")
    if not max_wrong_per_100 >= 0:
        raise ValueError(f"the cap on wrong suggestions per 100 words must be 0 or more, not {max_wrong_per_100}")


def _best_row(typed: Sequence[TypedEmail], rule: str, max_wrong_per_100: float,
              weights: Mapping[str, float] | None) -> tuple[dict[str, Any], bool]:
    """(the threshold, saved share and wrong per 100 words at the best candidate threshold, whether it is within
    the cap), every candidate typed at once (`typing_sweep`)."""
    thresholds = candidate_thresholds(typed, rule, weights=weights)
    saved, wrong = np.zeros(len(thresholds), dtype=np.int64), np.zeros(len(thresholds), dtype=np.int64)
    for e in typed:
        s, w = sweep(e, rule, thresholds, weights)
        saved += s
        wrong += w
    chars, words = sum(e.chars for e in typed), sum(e.words for e in typed)
    rows = [{"threshold": t, "saved": int(saved[j]) / chars if chars else None,
             "wrong_per_100_words": 100.0 * int(wrong[j]) / words if words else None}
            for j, t in enumerate(thresholds)]
    ok = [r for r in rows if (r["wrong_per_100_words"] or 0.0) <= max_wrong_per_100]
    # the largest saved share; on ties the higher threshold (fewer suggestions shown for the same saving)
    return (max(ok, key=lambda r: ((r["saved"] or 0.0), r["threshold"])), True) if ok else (rows[-1], False)


def best_threshold(typed: Sequence[TypedEmail], rule: str = DEFAULT_RULE,
                   max_wrong_per_100: float = MAX_WRONG_PER_100, *,
                   weights: Mapping[str, float] | None = None, intervals: bool = True) -> dict[str, Any]:
    """The threshold (among `candidate_thresholds`) whose saved share is largest while wrong suggestions
    stay at most `max_wrong_per_100` per 100 words, at fixed source `weights`; the highest threshold tried
    when none keeps to the cap. Returns `score_typing`'s row there (with `intervals`), "max_wrong_per_100"
    and "within_cap"."""
    _check(rule, max_wrong_per_100)
    pick, ok = _best_row(typed, rule, max_wrong_per_100, weights)
    return _scored(typed, rule, max_wrong_per_100, weights, pick["threshold"], ok, intervals)


def _scored(typed: Sequence[TypedEmail], rule: str, max_wrong_per_100: float, weights: Mapping[str, float] | None,
            threshold: float, ok: bool, intervals: bool) -> dict[str, Any]:
    """`best_threshold`'s row at the `threshold` a sweep picked (`ok`: within the cap)."""
    return {**score_typing(typed, rule, threshold, weights=weights, intervals=intervals),
            "max_wrong_per_100": max_wrong_per_100, "within_cap": ok}


def weight_settings(typed: Sequence[TypedEmail],
                    weight_grid: Mapping[str, Sequence[float]] | Sequence[float] | None = None
                    ) -> list[dict[str, float]]:
    """Every combination of weights to try: `weight_grid` per source, or one grid (default `WEIGHT_GRID`)
    for each source other than the model found in `typed`; [{}] when there is none."""
    if weight_grid is None or not isinstance(weight_grid, Mapping):
        grid = tuple(weight_grid) if weight_grid is not None else WEIGHT_GRID
        others = sorted({s for e in typed for s in e.sources()} - {MODEL})
        weight_grid = {s: grid for s in others}
    names = sorted(weight_grid)
    for s in names:
        if not weight_grid[s]:
            raise ValueError(f"the weight grid of source {s!r} is empty")
    return [dict(zip(names, combo)) for combo in itertools.product(*(weight_grid[s] for s in names))]


def fit_rank(row: Mapping[str, Any]) -> tuple[float, float]:
    """A fitted row (`best_threshold`, `fit_setting`) as a key to compare fits by: the saving within the cap
    first, else the fewer wrong suggestions."""
    if row.get("within_cap"):
        return 1.0, float(row.get("saved") or 0.0)
    return 0.0, -float(row.get("wrong_per_100_words") or 0.0)


def fit_setting(typed: Sequence[TypedEmail], rule: str = DEFAULT_RULE,
                max_wrong_per_100: float = MAX_WRONG_PER_100,
                weight_grid: Mapping[str, Sequence[float]] | Sequence[float] | None = None, *,
                intervals: bool = True) -> dict[str, Any]:
    """The (threshold, source weights) saving the most characters within the cap: `best_threshold` at each
    of `weight_settings(typed, weight_grid)`, the best kept (on ties the first in grid order: with the
    default grid, the smaller weight). Returns `best_threshold`'s row there ("weights" holds the fitted
    weights), with "settings_tried". When no setting keeps to the cap, the one with the fewest wrong."""
    _check(rule, max_wrong_per_100)
    best: tuple[tuple[float, float], dict[str, float], float, bool] | None = None
    settings = weight_settings(typed, weight_grid)
    for weights in settings:
        row, ok = _best_row(typed, rule, max_wrong_per_100, weights)
        score = ((row["saved"] or 0.0) if ok else -math.inf,
                 0.0 if ok else -(row["wrong_per_100_words"] or 0.0))
        if best is None or score > best[0]:
            best = (score, weights, row["threshold"], ok)
    assert best is not None  # weight_settings gives at least one setting
    _, weights, threshold, ok = best
    return {**_scored(typed, rule, max_wrong_per_100, weights, threshold, ok, intervals),
            "settings_tried": len(settings)}


# The lower quantile of the bootstrap a fitted setting's gain over the default must clear (`fit_served`).
GAIN_QUANTILE = 0.2


def gain_lower_bound(fitted: Sequence[Typing], default: Sequence[Typing], quantile: float = GAIN_QUANTILE,
                     resamples: int = BOOTSTRAP, seed: int = 0) -> float:
    """The `quantile` of the paired bootstrap of (saved share under `fitted` - under `default`), the same
    emails resampled for both: how much more the fitted setting saves at the least, at that confidence."""
    if len(fitted) != len(default):
        raise ValueError(f"the two settings must type the same emails: {len(fitted)} typings against {len(default)}")
    picks = draws(len(default), resamples, seed)
    gain = ratios([f.saved - d.saved for f, d in zip(fitted, default)], [d.chars for d in default], picks)
    low = quantiles(gain, [quantile])
    return low[0] if low else 0.0


def fit_served(typings: Mapping[str, Sequence[TypedEmail]], default: tuple[str, float, Mapping[str, float]],
               rule: str = DEFAULT_RULE, max_wrong_per_100: float = MAX_WRONG_PER_100,
               weight_grid: Mapping[str, Sequence[float]] | Sequence[float] | None = None,
               quantile: float = GAIN_QUANTILE, default_rule: str | None = None) -> dict[str, Any]:
    """The model, threshold and source weights to serve a person, fitted on their own typed emails, or the
    `default` (model name, threshold, weights; the threshold of `default_rule`, `rule` when None) unless the
    fit is sure to save more.

    `typings` are the same emails typed by each model that may be served (the preferred one first). Each is
    fitted (`fit_setting`), and the best fit (`fit_rank`; the first on a tie) is served only when it keeps
    to the cap and its gain over the default on these emails clears zero at the `quantile` of a paired
    bootstrap over emails (`gain_lower_bound`). A setting fitted on 10-40 emails is optimistic about the
    next ones: the best of many settings on few emails wins by chance as often as by being better, and a
    person for whom nothing helps would otherwise be served the luckiest setting and lose by it. Returns
    `fit_setting`'s row of the setting served (without intervals), with "model", "fitted" (whether the fit
    was taken), "gain_low" (None when no fit kept to the cap) and "saved_by_model" (each model's fitted
    saved share)."""
    names = list(typings)
    if default[0] not in typings:
        raise ValueError(f"the default model {default[0]!r} has no typings")
    rows = {name: fit_setting(typings[name], rule, max_wrong_per_100, weight_grid, intervals=False) for name in names}
    best = max(names, key=lambda name: fit_rank(rows[name]))
    model, threshold, weights = default
    kept_rule = rule if default_rule is None else default_rule
    base = [simulate(e, kept_rule, threshold, weights) for e in typings[model]]
    low: float | None = None  # none when the best fit breaks the cap
    if rows[best].get("within_cap"):
        fitted_weights = rows[best].get("weights") or {}
        low = gain_lower_bound([simulate(e, rule, rows[best]["threshold"], fitted_weights) for e in typings[best]],
                               base, quantile)
    if low is not None and low > 0:
        row: dict[str, Any] = {**rows[best], "model": best, "fitted": True}
    else:
        kept = score_typing(typings[model], kept_rule, threshold, weights=weights, intervals=False)
        row = {**kept, "model": model, "fitted": False,
               "within_cap": (kept["wrong_per_100_words"] or 0.0) <= max_wrong_per_100}
    return {**row, "gain_low": low, "saved_by_model": {name: r.get("saved") for name, r in rows.items()}}
