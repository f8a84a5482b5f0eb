"""Lesson `gradient-path`: how strongly the loss at position t reaches back to the input d tokens earlier.

For the loss at the last position t of a window, the norm of d loss_t / d x_(t-d), where x are the input
token embeddings (the output of the embedding lookup), averaged over held-out windows, for d = 0..L-1.

The lecture ("Recurrent memory creates information and training bottlenecks": "Long gradient paths:
distant credit passes through many Jacobians, complicating optimization"; "Self-attention removes the
sequential chain within a layer": "each output directly combines all input positions ... shorter paths
for learning"): in an RNN the only way from x_(t-d) to the loss at t is through d applications of the
transition, so the gradient is a product of d Jacobians diag(tanh') W_hh and shrinks (or explodes)
geometrically in d; gates (GRU, minGRU) can hold the product near 1 where they choose to keep the state;
attention reaches every earlier position in one step, so there is no product over d: the gradient at
distance d depends only on how much attention (and to what content) the model gives there. The untrained
(initial) curves show the architecture alone; the trained ones show what training made of it.

RNN and GRU run through PyTorch's fused kernels here (the default path of `RecurrentMixer`; the tests check
that the gate-by-gate loop gives the same profile), minGRU through its parallel scan.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from seqlab.data.batches import WindowSampler
from seqlab.data.prepare.options import PrepareConfig
from seqlab.data.prepare.pipeline import prepare
from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import load_tokenizer
from seqlab.inspection.figures import subplots
from seqlab.models import LM
from seqlab.studies.lessons.common import LessonResult, pick_size, write_lesson
from seqlab.studies.lessons.trained import ARCHS, ATTENTION, RECURRENT, base_config, initial_model, train_arch
from seqlab.studies.recipes import RECIPES, apply_recipe

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "gradient-path"


@dataclass(frozen=True)
class GradientPathSize:
    """How big one run of the lesson is; the window length L is the model's block_size."""

    preset: str
    overrides: tuple[str, ...]
    emails: int  # synthetic emails to prepare
    windows: int  # held-out windows the gradient norms are averaged over


SIZES: dict[str, GradientPathSize] = {
    "tiny": GradientPathSize("tiny", ("model.block_size=32", "model.n_layer=1", "model.n_embd=32", "model.n_head=2",
                          "train.max_steps=30", "train.batch_size=8", "train.threads=1", "train.warmup_steps=5",
                          "train.eval_every=30", "train.ckpt_every=30", "train.eval_batches=2"), 120, 8),
    "small": GradientPathSize("small", ("model.block_size=128", "model.n_layer=2", "model.n_embd=64", "model.n_head=4",
                            "train.max_steps=300", "train.batch_size=16", "train.threads=1",
                            "train.warmup_steps=30", "train.eval_every=100", "train.ckpt_every=300",
                            "train.eval_batches=8"), 600, 32),
}


def gradient_profile(model: LM, x: Tensor, y: Tensor) -> Tensor:
    """Mean over the batch of ||d loss_t / d x_(t-d)||_2 for t = T-1 and d = 0..T-1; x, y (B, T) -> (T,).

    The embedding lookup's output is swapped for a detached copy that requires grad, so the gradient
    stops there and is read per position. Each window's own loss is summed (not averaged) so every
    row of the gradient is that window's own d loss_t / d x; windows never interact in these models.
    """
    captured: list[Tensor] = []

    def make_leaf(module: torch.nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> Tensor:
        leaf = output.detach().requires_grad_(True)  # (B, T, C)
        captured.append(leaf)
        return leaf

    handle = model.wte.register_forward_hook(make_leaf)
    try:
        with torch.enable_grad():
            logits, _ = model(x)  # (B, T, V)
            loss = F.cross_entropy(logits[:, -1], y[:, -1], reduction="sum")  # loss at t = T-1
            (grad,) = torch.autograd.grad(loss, captured[0])  # (B, T, C)
    finally:
        handle.remove()
    norms = grad.double().norm(dim=-1)  # (B, T): one norm per window and input position
    return norms.flip(1).mean(dim=0)  # (T,), index d = t - position


def held_out_windows(data_dir: Path, length: int, count: int, seed: int) -> tuple[Tensor, Tensor]:
    """`count` windows (x, y), each (count, length), lying wholly inside validation emails."""
    store = TokenStore(data_dir, "val")
    if not store.num_emails:
        store = TokenStore(data_dir, "test")
    pad = load_tokenizer(data_dir / "tokenizer.json").pad_id
    # min_window_tokens = length + 1: only placements with every input and target inside one email
    sampler = WindowSampler(store, length, count, seed, pad, min_window_tokens=length + 1)
    return sampler.batch(0)


def profile_in_float64(model: LM, x: Tensor, y: Tensor) -> list[float]:
    """`gradient_profile` on a float64 copy: an RNN's gradient 100+ steps back is far below float32's range."""
    return gradient_profile(copy.deepcopy(model).double().eval(), x, y).tolist()


def decay_stats(norms: list[float]) -> dict[str, float]:
    """ratio norm(d=max)/norm(d=1), and the least-squares slope of ln(norm) against d over d = 1..max
    (per token; exp(slope) is the factor the gradient is multiplied by per step back)."""
    ds = list(range(1, len(norms)))
    logs = [math.log(max(norms[d], 1e-300)) for d in ds]
    md, ml = sum(ds) / len(ds), sum(logs) / len(logs)
    slope = sum((d - md) * (v - ml) for d, v in zip(ds, logs)) / sum((d - md) ** 2 for d in ds)
    return {"ratio_max_to_1": norms[-1] / norms[1], "slope_ln_per_token": slope, "factor_per_token": math.exp(slope)}


def table_distances(length: int) -> list[int]:
    """1, 2, 4, ... below L, and L - 1."""
    ds, d = [], 1
    while d < length - 1:
        ds.append(d)
        d *= 2
    return ds + [length - 1]


def _plot(curves: dict[str, dict[str, list[float]]], size: GradientPathSize) -> Figure:
    fig, ax = subplots(figsize=(7.5, 4.5))
    for arch in ARCHS:
        for kind, style in (("trained", "-"), ("init", "--")):
            norms = curves[kind][arch]
            label = RECIPES[arch].label + (" (untrained)" if kind == "init" else "")
            ax.plot(range(len(norms)), [max(v, 1e-300) for v in norms], style, color=RECIPES[arch].color,
                    label=label, lw=1.6 if kind == "trained" else 1.0)
    ax.set_yscale("log")
    ax.set_xlabel("distance d = t - s (tokens back from the predicted position t)")
    ax.set_ylabel("mean ||d loss_t / d x_s||")
    ax.set_title(f"Gradient paths: how far back the loss reaches (size={size.preset})")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3, which="both")
    return fig


def run(out: Path, *, size: str, seed: int = 0, progress: bool = True) -> LessonResult:
    """Train the four architectures briefly on synthetic mail and measure their gradient paths."""
    began = time.perf_counter()
    sz, work = pick_size(SIZES, size), Path(out) / "work" / NAME
    data = work / "data"
    prepare(PrepareConfig("synthetic", count=sz.emails, seed=seed, split=(0.8, 0.1, 0.1)), data, progress=progress)
    vocab = load_tokenizer(data / "tokenizer.json").vocab_size
    base = base_config(sz.preset, sz.overrides, seed)
    length = base.model.block_size
    x, y = held_out_windows(data, length, sz.windows, seed)
    curves: dict[str, dict[str, list[float]]] = {"trained": {}, "init": {}}
    info: dict[str, dict[str, float]] = {}
    for arch in ARCHS:
        cfg = apply_recipe(base, arch)
        curves["init"][arch] = profile_in_float64(initial_model(cfg, vocab), x, y)
        model, info[arch] = train_arch(data, work / "runs" / arch, cfg, progress=progress)
        curves["trained"][arch] = profile_in_float64(model, x, y)
    rows = [{"d": d, **{arch: curves["trained"][arch][d] for arch in ARCHS},
             **{f"{arch}_init": curves["init"][arch][d] for arch in ARCHS}} for d in table_distances(length)]
    stats = {kind: {arch: decay_stats(curves[kind][arch]) for arch in ARCHS} for kind in curves}
    measured = {"L": length, "windows": sz.windows, "stats": stats, "models": info,
                "seconds": round(time.perf_counter() - began, 1), "norms": curves}
    return write_lesson(Path(out), NAME, "Gradient paths: d loss_t / d x_(t-d) against distance d",
                        _plot(curves, sz), rows, _paragraph(stats, info, length, sz), measured)


def _paragraph(stats: dict[str, dict[str, dict[str, float]]], info: dict[str, dict[str, float]], length: int,
               size: GradientPathSize) -> str:
    """What was measured and what it shows, with the measured numbers."""
    label = {a: RECIPES[a].label for a in ARCHS}

    def describe(kind: str) -> str:
        return "; ".join(f"{label[a]} {stats[kind][a]['ratio_max_to_1']:.2g} "
                         f"(x{stats[kind][a]['factor_per_token']:.3f} per token)" for a in ARCHS)

    tr, init = stats["trained"], stats["init"]
    params = ", ".join(f"{label[a]} {int(info[a]['params']):,}" for a in ARCHS)
    changes = [f"{'slowed' if tr[a]['slope_ln_per_token'] > init[a]['slope_ln_per_token'] else 'sped up'} the "
               f"{label[a]}'s decay (x{init[a]['factor_per_token']:.3f} -> x{tr[a]['factor_per_token']:.3f} per token)"
               for a in RECURRENT]
    steepest = min(ARCHS, key=lambda a: tr[a]["slope_ln_per_token"])
    flattest = max(ARCHS, key=lambda a: tr[a]["slope_ln_per_token"])
    return (
        f"We trained an RNN, a GRU, a minGRU and an attention model (RoPE) of similar size "
        f"({params} parameters) for "
        f"{int(info['rnn']['steps'])} steps each on synthetic mail, then, on {size.windows} held-out windows of "
        f"L = {length} tokens, took the loss at the last position t and measured the norm of its gradient with "
        f"respect to each input embedding x_(t-d), averaged over the windows (solid: trained; dashed: the "
        f"same models before training). The ratio norm(d={length - 1}) / norm(d=1), with the fitted change "
        f"per token back, was, after training: {describe('trained')}; at initialisation: {describe('init')}. "
        f"A recurrent model reaches x_(t-d) only through d applications of its transition, so its gradient is "
        f"a product of d Jacobians and falls off geometrically (a straight line on this log scale): the "
        f"untrained RNN loses a factor {1 / init['rnn']['factor_per_token']:.2f} per token. Attention reaches "
        f"every earlier position in one step, so its curve has no built-in decay (untrained ratio "
        f"{init[ATTENTION]['ratio_max_to_1']:.2g}). After training the steepest decay was {label[steepest]}'s "
        f"and the flattest curve {label[flattest]}'s; training {', '.join(changes[:-1])} and {changes[-1]}."
    )
