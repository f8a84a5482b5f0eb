"""The percentile bootstrap over emails that every interval of the evaluation uses (Efron & Tibshirani 1993,
ch. 13).

Every figure it is used for is a ratio of sums over emails (saved characters over typed ones, wrong
suggestions over words, nats over bytes), so a resample is a draw of emails with replacement and the figure
is recomputed on the drawn emails. Emails, not positions, are the independent units: the positions of one
email share its topic and style. Two settings scored on the same emails are compared paired: both figures
are computed on the same draws (`draws` depends only on the number of emails and the seed), and the interval
is of their difference.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

BOOTSTRAP = 1000  # resamples, unless a caller asks for more


def draws(n: int, resamples: int = BOOTSTRAP, seed: int = 0) -> np.ndarray:
    """(resamples, n) email indices drawn with replacement; the same for the same (n, resamples, seed)."""
    return np.random.default_rng([seed]).integers(0, max(n, 1), size=(resamples if n else 0, n))


def ratios(top: Sequence[float] | np.ndarray, bottom: Sequence[float] | np.ndarray, picks: np.ndarray,
           scale: float = 1.0) -> np.ndarray:
    """scale * sum(top) / sum(bottom) over the emails of each draw (one row of `picks`): a (resamples,)
    array, NaN where the drawn emails' bottom sums to 0."""
    tops = np.asarray(top, dtype=np.float64)[picks].sum(axis=1)
    bottoms = np.asarray(bottom, dtype=np.float64)[picks].sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(bottoms != 0, scale * tops / np.where(bottoms != 0, bottoms, 1.0), np.nan)


def quantiles(stats: np.ndarray, qs: Sequence[float]) -> list[float] | None:
    """The `qs` quantiles of bootstrap `stats` (NaN draws left out); None when no draw is defined."""
    kept = stats[~np.isnan(stats)]
    return [float(v) for v in np.quantile(kept, qs)] if kept.size else None


def interval(stats: np.ndarray, level: float = 0.95) -> list[float] | None:
    """The central `level` percentile interval of bootstrap `stats`; None when no draw is defined."""
    return quantiles(stats, [(1 - level) / 2, (1 + level) / 2])
