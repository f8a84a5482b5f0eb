"""Lesson `permutation`: self-attention without positions cannot tell word order apart.

Lecture slides "Self-attention without positions is permutation equivariant" (SA(PX) = P SA(X) for any
permutation matrix P, with no mask or positional encoding) and "A sequence needs order beyond an
unordered collection" ("Send the report before the slides." vs "Send the slides before the report.":
without a mask or positions, "report" gets the same output vector in both sentences, just in another
row). The lesson measures both claims on one seeded self-attention layer, then repeats them with each
position kind of `seqlab.models.positional` and with the causal mask alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from seqlab.config import ModelConfig
from seqlab.inspection.figures import subplots
from seqlab.models.attention import MultiHeadAttention
from seqlab.models.positional import attention_positions, build_positions
from seqlab.studies.lessons.common import LessonResult, columns_by, pick_size, write_lesson

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SENTENCES = ("Send the report before the slides.", "Send the slides before the report.")
WORD = "report"
# (label, position kind, causal mask): "none" is the lecture's case; the rest each break the symmetry
VARIANTS: tuple[tuple[str, str, bool], ...] = (
    ("none", "none", False),
    ("learned", "learned", False),
    ("sinusoidal", "sinusoidal", False),
    ("rope", "rope", False),
    ("alibi", "alibi", False),
    ("causal mask", "none", True),
)
SIZES = {"tiny": {"n_embd": 32, "n_head": 4, "perms": 8}, "small": {"n_embd": 64, "n_head": 4, "perms": 200}}
ZERO_FLOOR = 1e-9  # an exactly equal pair is drawn at this height on the log axis (and labelled "0")

Layer = Callable[[Tensor], Tensor]


def words(sentence: str) -> list[str]:
    """Word-level tokens: runs of letters/digits and single punctuation marks ("slides." -> slides, .)."""
    return re.findall(r"\w+|[^\w\s]", sentence)


def word_embedding(vocab: list[str], n_embd: int, seed: int) -> dict[str, Tensor]:
    """A tiny word-level embedding: one seeded N(0, 1) vector of width n_embd per word."""
    gen = torch.Generator().manual_seed(seed)
    table = torch.randn(len(vocab), n_embd, generator=gen)  # (V, C)
    return {w: table[i] for i, w in enumerate(vocab)}


def self_attention_layer(kind: str, causal: bool, n_embd: int, n_head: int, seed: int) -> Layer:
    """One self-attention layer with position information of `kind`: rows (L, C) -> outputs (L, C).

    The attention weights come from the same seed for every kind, so variants differ only in their
    positions: learned/sinusoidal vectors are added to the input rows, rope/alibi act inside attention.
    """
    cfg = ModelConfig(vocab_size=2, block_size=64, n_embd=n_embd, n_head=n_head, pos=kind)
    with torch.random.fork_rng():  # leave the caller's global RNG as it was
        torch.manual_seed(seed)
        mha = MultiHeadAttention(n_embd, n_head, pos=attention_positions(cfg)).eval()
        additive = build_positions(cfg).eval()  # built second, so it cannot change the attention weights

    @torch.no_grad()
    def layer(rows: Tensor) -> Tensor:
        x = rows.unsqueeze(0)  # (L, C) -> (1, L, C)
        pe = additive.embed(torch.arange(rows.size(0)).unsqueeze(0))  # (1, L, C) or None
        if pe is not None:
            x = x + pe
        return mha(x, causal=causal)[0][0]  # (1, L, C) -> (L, C)

    return layer


def equivariance_error(layer: Layer, x: Tensor, n_perms: int, seed: int) -> float:
    """max over random permutations P of max |SA(PX) - P SA(X)| for rows x (L, C) (lecture slide)."""
    gen = torch.Generator().manual_seed(seed + 1)
    y = layer(x)  # (L, C)
    worst = 0.0
    for _ in range(n_perms):
        perm = torch.randperm(x.size(0), generator=gen)  # P as an index: (PX)[i] = X[perm[i]]
        worst = max(worst, float((layer(x[perm]) - y[perm]).abs().max()))
    return worst


def measure(size: str, seed: int) -> list[dict[str, float | str]]:
    """One table row per variant: how far apart the two "report" vectors are, and the equivariance error."""
    sz = pick_size(SIZES, size)
    toks = [words(s) for s in SENTENCES]
    vocab = list(dict.fromkeys(w for t in toks for w in t))  # unique words in order of appearance
    emb = word_embedding(vocab, sz["n_embd"], seed)
    xs = [torch.stack([emb[w] for w in t]) for t in toks]  # two (L, C) inputs with the same rows
    rows: list[dict[str, float | str]] = []
    for label, kind, causal in VARIANTS:
        layer = self_attention_layer(kind, causal, sz["n_embd"], sz["n_head"], seed)
        y1, y2 = (layer(x)[t.index(WORD)] for x, t in zip(xs, toks))  # (C,) each
        diff = y1 - y2
        rows.append({
            "position": label,
            "report_row_s1": toks[0].index(WORD),
            "report_row_s2": toks[1].index(WORD),
            "l2_diff": float(diff.norm()),
            "max_abs_diff": float(diff.abs().max()),
            "relative_diff": float(diff.norm() / y1.norm()),
            "equivariance_error": equivariance_error(layer, xs[0], sz["perms"], seed),
        })
    return rows


def plot(rows: list[dict[str, float | str]]) -> Figure:
    """Grouped bars on a log axis: the "report" difference and the equivariance error per variant."""
    labels = [str(r["position"]) for r in rows]
    x = np.arange(len(rows))
    fig, ax = subplots(figsize=(8, 4.2))
    for off, key, name, color in ((-0.2, "l2_diff", '||y_report(s1) - y_report(s2)||', "tab:blue"),
                                  (0.2, "equivariance_error", "max |SA(PX) - P SA(X)|", "tab:orange")):
        vals = [max(float(r[key]), ZERO_FLOOR) for r in rows]
        bars = ax.bar(x + off, vals, width=0.4, label=name, color=color)
        for bar, r in zip(bars, rows):
            v = float(r[key])
            ax.annotate("0" if v == 0 else f"{v:.2g}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylim(ZERO_FLOOR / 2, 1e2)
    ax.axhline(1e-6, color="gray", lw=0.8, ls="--")
    ax.text(-0.45, 1.4e-6, "float32 rounding", ha="left", fontsize=7, color="gray")
    ax.set_xticks(x, labels)
    ax.set_xlabel("position information (one self-attention layer, same weights)")
    ax.set_ylabel("difference (log scale)")
    ax.set_title('"Send the report before the slides." vs "...the slides before the report."')
    ax.legend(fontsize=8, loc="upper left")
    return fig


ROUNDING = 1e-5  # differences below this are float32 rounding; above 1e-3 they are real


def _verdicts(none: dict[str, float | str], others: list[dict[str, float | str]]) -> tuple[str, str]:
    """Plain-words readings of the no-position row and of the other variants, decided by the numbers."""
    same = float(none["max_abs_diff"]) < ROUNDING and float(none["equivariance_error"]) < ROUNDING
    first = ("float rounding, the same vector in another row" if same
             else "more than float rounding, which the lecture's claim does not predict")
    broken = [str(r["position"]) for r in others if float(r["equivariance_error"]) > 1e-3]
    kept = [str(r["position"]) for r in others if str(r["position"]) not in broken]
    second = ("every variant breaks the permutation symmetry" if not kept
              else f"the symmetry is broken by {', '.join(broken) or 'none'} but not by {', '.join(kept)}")
    return first, second


def paragraph(rows: list[dict[str, float | str]], size: str) -> str:
    """What was measured and what it shows, with the measured numbers."""
    sz = SIZES[size]
    none = next(r for r in rows if r["position"] == "none")
    others = [r for r in rows if r["position"] != "none"]
    listing = ", ".join(f"{r['position']} {float(r['l2_diff']):.3g} ({100 * float(r['relative_diff']):.0f}%)"
                        for r in others)
    smallest = min(others, key=lambda r: float(r["l2_diff"]))
    same, broken = _verdicts(none, others)
    return (
        f"We gave each word of \"{SENTENCES[0]}\" and \"{SENTENCES[1]}\" a seeded random {sz['n_embd']}-wide "
        f"vector and passed both sentences through one {sz['n_head']}-head self-attention layer with the same "
        f"weights. Without positions or a mask, the output vector of \"report\" (row {none['report_row_s1']} "
        f"in the first sentence, row {none['report_row_s2']} in the second, counting from 0) differs between "
        f"the sentences by at most {float(none['max_abs_diff']):.1e} per entry "
        f"(norm {float(none['l2_diff']):.1e}): {same}. "
        f"Over {sz['perms']} random permutations P, SA(PX) and P SA(X) agreed to "
        f"{float(none['equivariance_error']):.1e} (the lecture: SA(PX) = P SA(X)). "
        f"With position information, or the causal mask alone, the two \"report\" vectors differ by (norm, "
        f"relative to the vector): {listing}. The smallest, {smallest['position']}, is "
        f"{float(smallest['l2_diff']) / max(float(none['l2_diff']), ZERO_FLOOR):.1e} times the no-position "
        f"difference, and {broken} (equivariance errors from "
        f"{min(float(r['equivariance_error']) for r in others):.2g} to "
        f"{max(float(r['equivariance_error']) for r in others):.2g}). Attention alone sees a bag of words; "
        f"order reaches it only through positions, or through a mask that changes what each row may see."
    )


def run(out: Path, *, size: str, seed: int = 0, progress: bool = True) -> LessonResult:
    """Measure, plot and write `permutation.{png,csv,md,json}` into `out` (in about a second: `progress`
    has nothing to show)."""
    rows = measure(size, seed)
    measured = columns_by(rows, "position", ("l2_diff", "max_abs_diff", "relative_diff", "equivariance_error"))
    return write_lesson(Path(out), "permutation", "Attention needs positions to see word order", plot(rows),
                        rows, paragraph(rows, size), measured)
