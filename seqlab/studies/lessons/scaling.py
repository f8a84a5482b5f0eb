"""Lesson `scaling`: why attention divides its scores by sqrt(d_k).

Lecture slide "Divide by sqrt(d_k) to keep score fluctuations comparable": with independent unit-variance
query/key entries, z = q . k = sum_i q_i k_i has Var(z) = d_k, so raw scores spread as sqrt(d_k) and the
softmax saturates (one weight near 1, the rest near 0) "merely by width"; a saturated softmax has small
gradients. The lesson samples random queries and keys for d_k = 4 .. 512 and measures, with and without
the division, the largest softmax weight, the entropy of the weights and the size of the softmax
Jacobian (how much gradient reaches the scores), plus the slide's d_k = 20 worked example.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from seqlab.inspection.figures import subplots
from seqlab.models.attention import stable_softmax
from seqlab.studies.lessons.common import LessonResult, columns_by, pick_size, write_lesson

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DIMS = (4, 8, 16, 32, 64, 128, 256, 512)
N_KEYS = 32  # L: keys each query scores
# groups x queries per group = query rows; each group shares its N_KEYS keys (keeps memory small)
SIZES = {"tiny": {"groups": 10, "queries": 20}, "small": {"groups": 50, "queries": 40}}


def softmax_jacobian_norm(a: Tensor) -> Tensor:
    """Frobenius norm of the softmax Jacobian J = diag(a) - a a^T for each row a (..., L) -> (...).

    J_ij = a_i (delta_ij - a_j) (d a_i / d s_j), so ||J||_F^2 = sum_i a_i^2 - 2 sum_i a_i^3 + (sum_i a_i^2)^2.
    It is 0 for a one-hot row (no gradient reaches the scores) and largest for spread-out weights.
    """
    p2 = (a * a).sum(-1)
    p3 = (a * a * a).sum(-1)
    return (p2 - 2.0 * p3 + p2 * p2).clamp_min(0.0).sqrt()


SATURATED = 0.99  # a row counts as saturated when its largest weight exceeds this


def softmax_stats(scores: Tensor) -> dict[str, float]:
    """Over the rows of scores (N, L): mean largest weight, share of saturated rows, mean entropy (nats),
    mean entropy / log L and mean Jacobian norm."""
    a = stable_softmax(scores, dim=-1)  # (N, L), the lecture's row softmax with the maximum subtracted
    entropy = torch.special.entr(a).sum(-1)  # -sum_j a_j log a_j, with 0 log 0 = 0
    return {
        "max_weight": float(a.amax(-1).mean()),
        "saturated": float((a.amax(-1) > SATURATED).double().mean()),
        "entropy": float(entropy.mean()),
        "entropy_norm": float(entropy.mean() / math.log(scores.size(-1))),
        "jacobian_norm": float(softmax_jacobian_norm(a).mean()),
    }


def random_scores(d_k: int, groups: int, queries: int, gen: torch.Generator) -> Tensor:
    """Raw scores q . k for unit-variance q, k of width d_k: (groups * queries, N_KEYS), float64."""
    q = torch.randn(groups, queries, d_k, generator=gen, dtype=torch.float64)  # (G, Nq, d_k)
    k = torch.randn(groups, N_KEYS, d_k, generator=gen, dtype=torch.float64)  # (G, L, d_k)
    return (q @ k.transpose(1, 2)).reshape(groups * queries, N_KEYS)  # (G, Nq, L) -> (G*Nq, L)


def lecture_example(d_k: int = 20) -> dict[str, list[float]]:
    """The slide's example: two keys with a score gap sqrt(d_k), softmax with and without the division."""
    gap = math.sqrt(d_k)
    raw = torch.tensor([0.0, gap], dtype=torch.float64)
    return {"scores": raw.tolist(), "unscaled": stable_softmax(raw).tolist(),
            "scaled": stable_softmax(raw / math.sqrt(d_k)).tolist()}


def measure(size: str, seed: int) -> list[dict[str, float | int]]:
    """One row per d_k: score spread and the softmax statistics without and with the 1/sqrt(d_k)."""
    sz = pick_size(SIZES, size)
    gen = torch.Generator().manual_seed(seed)
    rows: list[dict[str, float | int]] = []
    for d_k in DIMS:
        s = random_scores(d_k, sz["groups"], sz["queries"], gen)
        raw, scaled = softmax_stats(s), softmax_stats(s / math.sqrt(d_k))
        row: dict[str, float | int] = {"d_k": d_k, "score_std_unscaled": float(s.std()),
                                       "score_std_scaled": float((s / math.sqrt(d_k)).std())}
        for key in raw:
            row[f"{key}_unscaled"], row[f"{key}_scaled"] = raw[key], scaled[key]
        rows.append(row)
    return rows


def plot(rows: list[dict[str, float | int]]) -> Figure:
    """Three panels against d_k (log2 axis): largest weight, entropy, Jacobian norm; scaled vs unscaled."""
    d = [int(r["d_k"]) for r in rows]
    fig, axes = subplots(1, 3, figsize=(13, 3.9))
    panels = (("max_weight", "mean largest softmax weight", False),
              ("entropy", "mean entropy of the weights (nats)", False),
              ("jacobian_norm", "mean softmax Jacobian norm ||diag(a) - a a^T||_F", True))
    for ax, (key, label, from_zero) in zip(axes, panels):
        ax.plot(d, [r[f"{key}_unscaled"] for r in rows], "o-", color="tab:red", label="q.k (unscaled)")
        ax.plot(d, [r[f"{key}_scaled"] for r in rows], "s-", color="tab:blue", label="q.k / sqrt(d_k)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(d, [str(v) for v in d])
        ax.set_xlabel("d_k (query/key width)")
        ax.set_title(label, fontsize=10)
        if from_zero:
            ax.set_ylim(bottom=0.0)
        ax.grid(alpha=0.3)
    axes[0].axhline(1.0, color="gray", lw=0.8, ls="--")
    axes[0].axhline(1.0 / N_KEYS, color="gray", lw=0.8, ls=":")
    axes[0].text(d[0], 1.0 / N_KEYS * 1.4, f"uniform 1/{N_KEYS}", fontsize=7, color="gray")
    axes[1].axhline(math.log(N_KEYS), color="gray", lw=0.8, ls=":")
    axes[1].text(d[0], math.log(N_KEYS) * 0.93, f"uniform: log {N_KEYS}", fontsize=7, color="gray")
    axes[0].legend(fontsize=8, loc="center right")
    fig.suptitle(f"Softmax over {N_KEYS} random keys: saturation without 1/sqrt(d_k)", fontsize=11)
    fig.tight_layout()
    return fig


def paragraph(rows: list[dict[str, float | int]], example: dict[str, list[float]], n_rows: int) -> str:
    """What was measured and what it shows, with the measured numbers."""
    lo, hi = rows[0], rows[-1]
    scaled_max = [float(r["max_weight_scaled"]) for r in rows]
    u, s = example["unscaled"], example["scaled"]
    peak = max(rows, key=lambda r: float(r["jacobian_norm_unscaled"]))
    raw_max = [float(r["max_weight_unscaled"]) for r in rows]
    saturates = all(b > a for a, b in zip(raw_max, raw_max[1:])) and raw_max[-1] > 0.9
    reading = ("The softmax saturates toward one-hot merely because the vectors are wider." if saturates
               else "At these sizes the unscaled softmax did not clearly saturate.")
    slide = [round(100 * x, 1) for x in u + s] == [1.1, 98.9, 26.9, 73.1]
    return (
        f"For each width d_k from {lo['d_k']} to {hi['d_k']} we drew {n_rows} queries, each scoring "
        f"{N_KEYS} keys, all entries independent N(0, 1), and took the row softmax of the raw scores q.k and "
        f"of q.k / sqrt(d_k). The raw scores' standard deviation grew from {float(lo['score_std_unscaled']):.2f} "
        f"to {float(hi['score_std_unscaled']):.1f} (sqrt(d_k) = {math.sqrt(int(lo['d_k'])):.0f} to "
        f"{math.sqrt(int(hi['d_k'])):.1f}, the lecture's Var(z) = d_k); divided by sqrt(d_k) it stayed "
        f"{float(lo['score_std_scaled']):.2f} to {float(hi['score_std_scaled']):.2f}. Without the division the "
        f"mean largest weight rose from {float(lo['max_weight_unscaled']):.3f} to "
        f"{float(hi['max_weight_unscaled']):.3f}, the entropy fell from {float(lo['entropy_unscaled']):.2f} to "
        f"{float(hi['entropy_unscaled']):.3f} nats (uniform: log {N_KEYS} = {math.log(N_KEYS):.2f}) and the "
        f"softmax Jacobian norm, which scales every gradient that reaches the scores, peaked at "
        f"{float(peak['jacobian_norm_unscaled']):.3f} (d_k = {peak['d_k']}) and fell to "
        f"{float(hi['jacobian_norm_unscaled']):.2g}; at d_k = "
        f"{hi['d_k']} {100 * float(hi['saturated_unscaled']):.0f}% of the rows had a weight above {SATURATED} "
        f"(at d_k = {lo['d_k']}: {100 * float(lo['saturated_unscaled']):.0f}%). {reading} "
        f"With the division the largest weight stayed between {min(scaled_max):.3f} and {max(scaled_max):.3f} "
        f"(saturated rows: at most {100 * max(float(r['saturated_scaled']) for r in rows):.1f}%), the entropy near "
        f"{float(hi['entropy_scaled']):.2f} nats and the Jacobian norm near {float(hi['jacobian_norm_scaled']):.3f} "
        f"at every width. The slide's example (d_k = 20, scores [0, sqrt 20] = [0, {example['scores'][1]:.2f}]) "
        f"computed by seqlab's stable_softmax gives [{100 * u[0]:.1f}%, {100 * u[1]:.1f}%] unscaled and "
        f"[{100 * s[0]:.1f}%, {100 * s[1]:.1f}%] after dividing by sqrt 20"
        f"{', as on the slide' if slide else ', not the slide numbers'}."
    )


def run(out: Path, *, size: str, seed: int = 0, progress: bool = True) -> LessonResult:
    """Measure, plot and write `scaling.{png,csv,md,json}` into `out` (in about a second: `progress` has
    nothing to show)."""
    sz = pick_size(SIZES, size)
    rows = measure(size, seed)
    example = lecture_example(20)
    n_rows = sz["groups"] * sz["queries"]
    keys = [f"{key}_{kind}" for key in ("max_weight", "saturated", "entropy", "entropy_norm", "jacobian_norm")
            for kind in ("unscaled", "scaled")]
    measured = {"n_keys": N_KEYS, "n_queries": n_rows, "lecture_example_d20": example, **columns_by(rows, "d_k", keys)}
    return write_lesson(Path(out), "scaling", "Dividing attention scores by sqrt(d_k) prevents saturation",
                        plot(rows), rows, paragraph(rows, example, n_rows), measured)
