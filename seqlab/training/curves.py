"""What a candidate recipe reaches in S steps: its validation bits per byte read off its measured curve, with
how sure that reading is.

A curve is a candidate's bits per byte after whole runs of S_1 < ... < S_n steps (each run cooled down at its
own end; `studies/recipe_curves.py` measures them). Inside the measured steps the reading interpolates linearly
in log S, between runs that really ended there. Past the last run it follows a power law in steps,

    L(S) = E + A * S^(-alpha)

fitted to the runs of at least MIN_FIT_STEPS steps (warmup-dominated short runs bend away from it), with one
alpha shared by every candidate of a family (the same mixer at other widths and depths), while each candidate
keeps its own floor E and scale A: the form of Kaplan et al. 2020 ("Scaling Laws for Neural Language Models",
section 5), whose loss against model size and steps has one exponent in steps for every size. Sharing it
gives the fit more runs to pin the exponent on. The reading is anchored on the candidate's last run, so it
is continuous where the measurements stop.

How sure: inside the runs, the worst error of a straight line in log steps predicting each inner run from its
neighbours (scaled to the runs' own spacing); past them, the larger of the fit's jackknife spread (the fit
redone without each run) and the error the fit made predicting the last run from the others, grown with the
distance in log steps (with fewer than four long runs, the gap between the law and a straight line in log
steps). Never under FLOOR.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

MIN_FIT_STEPS = 2000
ALPHAS = np.linspace(0.05, 1.5, 146)  # the exponents tried: a grid, E and A are linear given alpha
# the least uncertainty claimed: the same run on two machines' bf16 (the table's cells and these curves)
# differed by up to this much (docs/training.md)
FLOOR = 0.01


@dataclass(frozen=True)
class Reading:
    """A curve read at `steps`: `val_bpb` give or take `plus_minus`; `how` is "measured", "interpolated" or
    "extrapolated"."""

    steps: int
    val_bpb: float
    plus_minus: float
    how: str


Points = Sequence[tuple[float, float]]  # (steps, val bits per byte), steps increasing


def _interp(points: Points, steps: float) -> float:
    xs = [math.log(s) for s, _ in points]
    return float(np.interp(math.log(steps), xs, [v for _, v in points]))


def _fit(curves: Sequence[Points]) -> tuple[float, list[tuple[float, float]]]:
    """One alpha for all `curves`, and each curve's (E, A): least squares over the alpha grid."""
    best: tuple[float, float, list[tuple[float, float]]] | None = None
    for alpha in ALPHAS:
        sse, coefs = 0.0, []
        for pts in curves:
            x = np.array([s ** -alpha for s, _ in pts])
            y = np.array([v for _, v in pts])
            design = np.stack([np.ones_like(x), x], axis=1)
            (e, a), *_ = np.linalg.lstsq(design, y, rcond=None)
            sse += float(((design @ np.array([e, a]) - y) ** 2).sum())
            coefs.append((float(e), float(a)))
        if best is None or sse < best[0]:
            best = (sse, float(alpha), coefs)
    assert best is not None
    return best[1], best[2]


def _law(points: Points, family: Sequence[Points], steps: float) -> float:
    """The power law's reading at `steps`, anchored at the last point of `points` (module doc)."""
    fitted = [p for p in (points, *family) if len(p) >= 2]
    alpha, coefs = _fit(fitted)
    e, a = coefs[0]
    last_s, last_v = points[-1]
    return last_v + a * (steps ** -alpha - last_s ** -alpha)


def read(points: Points, steps: float, family: Sequence[Points] = ()) -> Reading:
    """`points` read at `steps` (module doc); `family` are the other curves of its family, for the exponent."""
    points = sorted(points)
    if not points:
        raise ValueError("a curve needs at least one measured run")
    first, last = points[0][0], points[-1][0]
    for s, v in points:
        if abs(s - steps) <= 0.005 * s:
            return Reading(round(steps), v, FLOOR, "measured")
    if first <= steps <= last:
        return Reading(round(steps), _interp(points, steps), _interp_error(points), "interpolated")
    fit, others = _falling(points), [_falling(sorted(f)) for f in family]
    # a law needs three long runs for its exponent, or two when the family's runs pin the exponent; a curve
    # that has turned up (overfitting: the corpus seen many times over) is read on along its last rise
    turned = points[-1][1] > min(v for _, v in points)
    if steps < first or turned or len(fit) < (2 if any(len(f) >= 3 for f in others) else 3):
        # before the first run, or too few long runs for a law: the nearest run's slope in log steps, held on
        near = points[:2] if steps < first else points[-2:]
        value = _line(near, steps)
        nearest = near[0][1] if steps < first else near[-1][1]
        return Reading(round(steps), value, max(FLOOR, abs(value - nearest)), "extrapolated")
    value = _law(fit, others, steps)
    error = _law_error(fit, others, steps, value)
    if len(fit) < 4:  # too few runs to test the law on: the gap to a straight line in log steps instead
        error = max(error, abs(value - _line(fit[-2:], steps)))
    return Reading(round(steps), value, error, "extrapolated")


def _falling(points: Points) -> list[tuple[float, float]]:
    """The runs a law is fitted to: of at least MIN_FIT_STEPS steps, up to the curve's lowest."""
    lowest = min(points, key=lambda p: p[1])[0]
    return [p for p in points if MIN_FIT_STEPS <= p[0] <= lowest]


def best_within(points: Points, steps: float, family: Sequence[Points] = ()) -> Reading:
    """The lowest reading at `steps` or at a shorter measured run: a run whose curve rises before `steps` is
    better stopped at its lowest run's length. Only a rise beyond the reading's uncertainty counts: runs a few
    hundred steps apart, on two machines, differ by that much with no rise at all."""
    here = read(points, steps, family)
    shorter = [Reading(round(s), v, FLOOR, "measured") for s, v in points
               if s < steps and v < here.val_bpb - here.plus_minus]
    return min([here, *shorter], key=lambda r: r.val_bpb)


def _line(points: Points, steps: float) -> float:
    """The straight line in log steps through the first and last of `points`, from the nearer end."""
    if len(points) < 2:
        return points[0][1]
    (s0, v0), (s1, v1) = points[0], points[-1]
    slope = (v1 - v0) / math.log(s1 / s0)
    anchor_s, anchor_v = (s1, v1) if steps > s1 else (s0, v0)
    return anchor_v + slope * math.log(steps / anchor_s)


def _interp_error(points: Points) -> float:
    """The worst error of log-step interpolation predicting each inner run from its two neighbours, a quarter
    of it: those neighbours are twice as far apart as the runs the reading sits between, and the error of a
    straight line across a smooth curve grows with the square of the gap."""
    errors = [abs(_interp([points[i - 1], points[i + 1]], points[i][0]) - points[i][1])
              for i in range(1, len(points) - 1)]
    return max([FLOOR, *(e / 4 for e in errors)])


def _law_error(fit: Points, others: Sequence[Points], steps: float, value: float) -> float:
    """The jackknife spread of the law's reading, or its miss on the last run grown with the distance."""
    spread = 0.0
    if len(fit) >= 4:
        # the last run stays: it anchors the reading
        drops = [_law([*fit[:i], *fit[i + 1:]], others, steps) for i in range(len(fit) - 1)]
        mean = sum(drops) / len(drops)
        spread = math.sqrt((len(drops) - 1) / len(drops) * sum((d - mean) ** 2 for d in drops))
    miss = 0.0
    if len(fit) >= 4:
        (prev_s, _), (last_s, last_v) = fit[-2], fit[-1]
        guess = _law(fit[:-1], others, last_s)
        miss = abs(guess - last_v) * math.log(steps / last_s) / math.log(last_s / prev_s)
    return max(FLOOR, spread, miss)


def read_table_curve(curves: Mapping[str, Mapping], name: str, steps: float,
                     families: Mapping[str, str], within: bool = False) -> Reading:
    """Candidate `name`'s curve of the recipe table's "curves" read at `steps` (`within`: its best at `steps` or
    fewer, `best_within`), its family's other curves (`families`: candidate -> family) sharing the exponent."""
    def pts(c: Mapping) -> list[tuple[float, float]]:
        return [(float(e["steps"]), float(e["val_bpb"])) for e in c["ends"]]

    family = [pts(c) for other, c in curves.items()
              if other != name and families.get(other) == families.get(name)]
    return (best_within if within else read)(pts(curves[name]), steps, family)
