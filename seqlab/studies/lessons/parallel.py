"""Lesson `parallel`: time of one training step against sequence length for sequential and parallel mixers.

Lecture: a recurrent model computes h_t from h_{t-1}, so its L steps run one after another ("Shared
recurrent computation"), while self-attention is "one input-dependent matrix operation" over all rows at
once, at a cost that grows with L^2 (an L x L score matrix). minGRU (Feng et al. 2024) keeps a recurrence
but one whose gates read only the input, so a parallel scan computes every h_t at once.

Each model here is one mixer layer of width n_embd (the layer the LM shell stacks), timed for one
training step: forward over (B, L, C), a mean-square loss, backward. RNN and GRU run twice: through the
explicit gate-by-gate Python loop and through PyTorch's fused kernel (both sequential in L).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor, nn

from seqlab.config import ModelConfig
from seqlab.inspection.figures import subplots
from seqlab.models.lm import MIXERS
from seqlab.studies.lessons.common import LessonResult, pick_size, write_lesson

if TYPE_CHECKING:
    from matplotlib.figure import Figure

N_EMBD, N_HEAD, BATCH = 64, 4, 4
SIZES = {
    "tiny": {"lengths": (16, 32, 64), "repeats": 1, "warmup": 1},
    "small": {"lengths": (64, 128, 256, 512, 1024, 2048), "repeats": 5, "warmup": 2},
}
# One torch thread: "parallel" then means fewer, larger operations rather than more cores, and the
# timings do not depend on how many cores a shared machine happens to have free.
THREADS = 1
# label -> (mixer name in MIXERS, fused_rnn: PyTorch's kernel for RNN/GRU instead of the explicit loop)
MODELS: dict[str, tuple[str, bool]] = {
    "RNN (loop)": ("rnn", False),
    "RNN (fused)": ("rnn", True),
    "GRU (loop)": ("gru", False),
    "GRU (fused)": ("gru", True),
    "minGRU (scan)": ("mingru", True),
    "attention": ("attention", True),
}
STYLE = {"RNN (loop)": ("tab:green", "--", "v"), "RNN (fused)": ("tab:green", "-", "v"),
         "GRU (loop)": ("tab:orange", "--", "s"), "GRU (fused)": ("tab:orange", "-", "s"),
         "minGRU (scan)": ("tab:blue", "-", "o"), "attention": ("tab:red", "-", "D")}

Step = Callable[[], None]


def build_mixer(label: str) -> nn.Module:
    """One mixer layer of width N_EMBD from the LM's registry (attention: causal, N_HEAD heads, no positions,
    so only the L x L attention itself is timed)."""
    mixer, fused = MODELS[label]
    cfg = ModelConfig(vocab_size=2, block_size=64, mixer=mixer, n_embd=N_EMBD, n_head=N_HEAD, pos="none",
                      fused_rnn=fused)
    return MIXERS[mixer](cfg)


def training_step(mixer: nn.Module, x: Tensor) -> Step:
    """Forward x (B, L, C) through the mixer, a mean-square loss, backward, then drop the gradients."""

    def step() -> None:
        y, _ = mixer(x)  # (B, L, C); attention's default is causal, as in the LM
        y.pow(2).mean().backward()
        mixer.zero_grad(set_to_none=True)

    return step


def time_models(steps: dict[str, Step], repeats: int, warmup: int) -> dict[str, float]:
    """Median seconds per step for each model; the models take turns in each repeat (rotating the order) so
    that a change in machine load hits them all alike."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for r in range(repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:
            t0 = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def growth_exponent(lengths: list[int], seconds: list[float]) -> float:
    """Least-squares slope k of log(time) against log(L): time ~ L^k, so each doubling multiplies it by 2^k."""
    k, _ = np.polyfit(np.log(lengths), np.log(seconds), 1)
    return float(k)


def crossover(lengths: list[int], attn: list[float], other: list[float]) -> int | None:
    """The smallest L from which attention is slower than `other` at every longer length too, else None."""
    for i, length in enumerate(lengths):
        if all(a > o for a, o in zip(attn[i:], other[i:])):
            return length
    return None


def measure(size: str, seed: int, progress: bool) -> dict[str, dict[int, float]]:
    """Milliseconds per training step: {model label: {L: ms}}."""
    sz = pick_size(SIZES, size)
    with torch.random.fork_rng():  # seeded weights without touching the caller's global RNG
        torch.manual_seed(seed)
        mixers = {label: build_mixer(label) for label in MODELS}
    gen = torch.Generator().manual_seed(seed)
    ms: dict[str, dict[int, float]] = {label: {} for label in MODELS}
    for length in sz["lengths"]:
        x = torch.randn(BATCH, length, N_EMBD, generator=gen)  # (B, L, C), no gradient needed into x
        steps = {label: training_step(m, x) for label, m in mixers.items()}
        for label, sec in time_models(steps, sz["repeats"], sz["warmup"]).items():
            ms[label][length] = 1000.0 * sec
        if progress:
            print(f"parallel: L={length} " + ", ".join(f"{k} {v[length]:.1f} ms" for k, v in ms.items()), flush=True)
    return ms


def summarize(ms: dict[str, dict[int, float]]) -> dict[str, object]:
    """Growth exponents (all lengths, and the longer half where the asymptotic cost shows) and crossovers."""
    lengths = sorted(next(iter(ms.values())))
    tail = lengths[max(0, len(lengths) // 2 - 1):]  # e.g. 256..2048 of 64..2048: past the fixed overheads
    attn = [ms["attention"][n] for n in lengths]
    return {
        "lengths": lengths,
        "exponent_all": {k: growth_exponent(lengths, [v[n] for n in lengths]) for k, v in ms.items()},
        "exponent_long": {k: growth_exponent(tail, [v[n] for n in tail]) for k, v in ms.items()},
        "long_from": tail[0],
        "crossover": {k: crossover(lengths, attn, [ms[k][n] for n in lengths]) for k in ms if k != "attention"},
    }


def plot(ms: dict[str, dict[int, float]], summary: dict[str, object]) -> Figure:
    """Log-log time per step against L, one line per model, the attention crossovers marked."""
    lengths: list[int] = summary["lengths"]  # type: ignore[assignment]
    fig, ax = subplots(figsize=(8.5, 5))
    for label, times in ms.items():
        color, ls, marker = STYLE[label]
        ax.plot(lengths, [times[n] for n in lengths], ls=ls, marker=marker, color=color, label=label)
    # slope guides from below the fastest first point: linear (recurrences) and quadratic (attention scores)
    x0 = lengths[0]
    y0 = 0.5 * min(times[x0] for times in ms.values())
    for power, text in ((1, "~ L"), (2, "~ L^2")):
        y1 = y0 * (lengths[-1] / x0) ** power
        ax.plot([x0, lengths[-1]], [y0, y1], ":", color="gray", lw=0.9)
        ax.annotate(text, (lengths[-1], y1), xytext=(4, -3), textcoords="offset points", fontsize=8, color="gray")
    cross: dict[str, int | None] = summary["crossover"]  # type: ignore[assignment]
    for i, label in enumerate(("minGRU (scan)", "GRU (fused)")):
        at = cross.get(label)
        if at is not None:  # a vertical line at the crossover, labelled near the bottom of the axes
            color = STYLE[label][0]
            ax.axvline(at, color=color, lw=1.0, alpha=0.7)
            ax.annotate(f"attention slower than {label}\nfrom L = {at}", (at, 0.03 + 0.1 * i),
                        xycoords=("data", "axes fraction"), xytext=(-4, 0), textcoords="offset points",
                        ha="right", fontsize=8, color=color)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.set_xlabel("sequence length L")
    ax.set_ylabel("ms per training step (forward + backward), median")
    ax.set_title(f"One mixer layer, batch {BATCH}, width {N_EMBD}, {THREADS} CPU thread")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return fig


def _crossing_text(label: str, at: int | None, lengths: list[int], ms: dict[str, dict[int, float]]) -> str:
    if at is None:
        return f"stayed faster than {label} up to L = {lengths[-1]}"
    if at == lengths[0]:
        return f"was slower than {label} at every length"
    return (f"became slower than {label} from L = {at} ({ms['attention'][at]:.1f} vs {ms[label][at]:.1f} ms; "
            f"faster at L = {lengths[lengths.index(at) - 1]})")


def _reading(ms: dict[str, dict[int, float]], k: dict[str, float], top: int) -> str:
    """What the exponents and the loop/fused ratio say, worded by what was actually measured."""
    linear = ("RNN (fused)", "GRU (fused)", "minGRU (scan)")  # kernels whose work is linear in L
    lo, hi = min(k[r] for r in linear), max(k[r] for r in linear)
    ka = k["attention"]
    ratio = ms["GRU (loop)"][top] / ms["GRU (fused)"][top]
    loop = (f"The explicit GRU loop took {ratio:.1f}x the fused GRU's time at L = {top}"
            + (" (the loop launches several small operations per position, forward and backward). " if ratio > 1
               else ", so at this size the per-position overhead of the Python loop did not show. "))
    if ka > hi:
        shape = (f"Attention's exponent {ka:.2f} is above the fused kernels' and the scan's ({lo:.2f} to "
                 f"{hi:.2f}): its L x L score matrix makes its cost grow faster with L (2 would be purely "
                 f"quadratic, 1 linear).")
    else:
        shape = (f"Attention's exponent {ka:.2f} is not above the fused kernels' and the scan's ({lo:.2f} to "
                 f"{hi:.2f}): at these lengths its L x L score matrix does not yet dominate its cost.")
    return loop + shape


def paragraph(ms: dict[str, dict[int, float]], summary: dict[str, object], size: str) -> str:
    """What was measured and what it shows, with the measured numbers."""
    sz = pick_size(SIZES, size)
    lengths: list[int] = summary["lengths"]  # type: ignore[assignment]
    top = lengths[-1]
    k: dict[str, float] = summary["exponent_long"]  # type: ignore[assignment]
    cross: dict[str, int | None] = summary["crossover"]  # type: ignore[assignment]
    at_top = ", ".join(f"{label} {times[top]:.1f} ms" for label, times in ms.items())
    growth = ", ".join(f"{label} {k[label]:.2f} (x{2 ** k[label]:.2f})" for label in ms)
    timing = "one run" if sz["repeats"] == 1 else f"the median of {sz['repeats']} runs"
    return (
        f"We timed one training step (forward over a batch of {BATCH} sequences of width {N_EMBD}, a "
        f"mean-square loss, backward) of a single mixer layer for L = {', '.join(map(str, lengths))}: RNN and "
        f"GRU through the explicit per-step loop and through PyTorch's fused kernel (both must finish step t "
        f"before step t + 1), minGRU through its parallel scan, and causal {N_HEAD}-head attention. Each number "
        f"is {timing} after {sz['warmup']} warm-up, on {THREADS} CPU thread (so parallel means fewer, larger "
        f"operations, not more cores). At L = {top}: {at_top}. Fitting log time against log L for "
        f"L >= {summary['long_from']} gives growth exponents (time multiplier per doubling of L): {growth}. "
        f"{_reading(ms, k, top)} Attention "
        f"{_crossing_text('minGRU (scan)', cross['minGRU (scan)'], lengths, ms)}, "
        f"{_crossing_text('GRU (fused)', cross['GRU (fused)'], lengths, ms)}, and "
        f"{_crossing_text('GRU (loop)', cross['GRU (loop)'], lengths, ms)}."
    )


def run(out: Path, *, size: str, seed: int = 0, progress: bool = True) -> LessonResult:
    """Time, plot and write `parallel.{png,csv,md,json}` into `out` (torch threads restored afterwards)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        ms = measure(size, seed, progress)
    finally:
        torch.set_num_threads(threads)
    summary = summarize(ms)
    lengths: list[int] = summary["lengths"]  # type: ignore[assignment]
    rows = [{"L": n, **{f"{label} ms": ms[label][n] for label in ms}} for n in lengths]
    measured = {"ms": {label: {str(n): t for n, t in times.items()} for label, times in ms.items()},
                **summary, "threads": THREADS, "batch": BATCH, "n_embd": N_EMBD, "repeats": SIZES[size]["repeats"]}
    return write_lesson(Path(out), "parallel", "Sequential recurrences vs parallel attention: time per step",
                        plot(ms, summary), rows, paragraph(ms, summary, size), measured)
