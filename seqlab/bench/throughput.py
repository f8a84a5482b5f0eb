"""Training throughput against the machine's limit and against plain PyTorch ("throughput" rows).

One training step is what the trainer does: forward, `lm_loss`, backward, the optimizer step, gradients
dropped. seqlab's side uses `build_model` and the trainer's `make_optimizer`; the plain side
(`seqlab.bench.plain`) the models one writes without seqlab and `torch.optim.AdamW` with its defaults.
The batches are random token ids of the full window (the FLOPs do not depend on the values; no padding,
no resets, so a recurrent LM runs unbroken sequences), a new one each step from a pool of `POOL` drawn
from one seed, the same pool for the sides of a comparison. One batch repeated step after step is
memorised within a few dozen steps: the softmax saturates, its gradients fall to subnormal floats,
and the step slows by a factor that depends on how fast that side learns (the experiments index),
which a trainer that never repeats a batch does not see.

Rows:
  <family> small            each family's `small` preset (recurrent ones with model.pos=none):
                            tokens/s, FLOPs per token (`seqlab.training.flops`) and MFU
MFU is measured against the median time of a 2048 x 2048 fp32 matmul timed right after the steps
(so both saw much the same load; the peak measured once at start heads the table).
  attention LM vs plain     4 layers, 256 wide, 4 heads, learned positions, window 256, batch 32:
                            tokens/s ratio, goal >= 1.0; and seqlab's MFU, goal >= 60%
  GRU LM vs plain           the same shape with a GRU mixer, against an LM on torch.nn.GRU; goal >= 0.95
All these rows run under the trainer's allocator setting (`seqlab.training.cpu_allocator`), as the
trainer's steps do; `seqlab.bench.allocator` adds the rows that time it on and off.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from seqlab.bench.harness import Step, row, time_steps
from seqlab.bench.plain import PlainGRULM, PlainTransformerLM
from seqlab.config import ModelConfig, get_preset
from seqlab.evaluation.heldout import lm_loss
from seqlab.models import build_model
from seqlab.runs.precision import autocast_for
from seqlab.training.cpu_allocator import keep_freed_memory
from seqlab.training.flops import flops_per_token, mfu
from seqlab.training.optim import make_optimizer

FAMILIES = ("attention", "gru", "mingru", "rnn")
SECTION = "throughput"


def family_config(family: str, preset: str = "small") -> tuple[ModelConfig, int]:
    """(model config, batch size) of a preset for one mixer family; recurrent mixers take pos=none."""
    cfg = get_preset(preset)
    pos = cfg.model.pos if family == "attention" else "none"
    m = dataclasses.replace(cfg.model, vocab_size=259, mixer=family, pos=pos)  # the byte tokenizer's vocabulary
    return m, cfg.train.batch_size


def shape_config(mixer: str, quick: bool) -> tuple[ModelConfig, int]:
    """The comparison shape of the goal rows: 4 layers, 256 wide, 4 heads, window 256, batch 32 (quick: halved)."""
    if quick:
        return ModelConfig(vocab_size=259, block_size=128, n_layer=2, n_embd=128, n_head=4, mixer=mixer,
                           pos="learned" if mixer == "attention" else "none"), 16
    return ModelConfig(vocab_size=259, block_size=256, n_layer=4, n_embd=256, n_head=4, mixer=mixer,
                       pos="learned" if mixer == "attention" else "none"), 32


POOL = 16

Batches = list[tuple[torch.Tensor, torch.Tensor]]


def batch_pool(cfg: ModelConfig, batch: int, seed: int = 0, size: int = POOL) -> Batches:
    """`size` (input, target) pairs of random token ids (batch, block_size) each, from `seed` alone."""
    gen = torch.Generator().manual_seed(seed)
    return [tuple(torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), generator=gen)  # type: ignore[misc]
                  for _ in range(2)) for _ in range(size)]


def lm_step(model: nn.Module, forward: Callable[[torch.Tensor], torch.Tensor], opt: torch.optim.Optimizer,
            batches: Batches) -> Step:
    """One training step of an LM on the next batch of the pool: forward, cross-entropy, backward,
    optimizer step, gradients dropped."""
    turn = itertools.count()

    def step() -> None:
        x, y = batches[next(turn) % len(batches)]
        lm_loss(forward(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def seqlab_step(cfg: ModelConfig, batch: int, seed: int = 0, precision: str = "fp32") -> tuple[nn.Module, Step]:
    """A seqlab model and its training step; `precision` "bf16" runs the forward pass under CPU bf16
    autocast (`seqlab.runs.precision.autocast_for`), as the trainer does under train.precision=bf16."""
    torch.manual_seed(seed)
    model = build_model(cfg)
    opt = make_optimizer(model, 1e-3, 0.1, (0.9, 0.95), torch.device("cpu"))
    ctx = autocast_for(precision, torch.device("cpu"))

    def forward(t: torch.Tensor) -> torch.Tensor:
        with ctx():
            return model(t)[0]

    return model, lm_step(model, forward, opt, batch_pool(cfg, batch, seed))


def plain_step(model: nn.Module, cfg: ModelConfig, batch: int, fused: bool = False) -> Step:
    """The plain model's training step, with `torch.optim.AdamW` (its for-each default, or fused), on the
    same batches as `seqlab_step` with seed 0."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), fused=fused or None)
    return lm_step(model, model, opt, batch_pool(cfg, batch))


PEAK_N = 2048


def matmul_probe() -> Step:
    """One fp32 (2048, 2048) @ (2048, 2048) matmul: the peak an MFU is measured against."""
    a, b = torch.randn(PEAK_N, PEAK_N), torch.randn(PEAK_N, PEAK_N)

    def step() -> None:
        torch.mm(a, b)

    return step


def timed_with_peak(steps: list[Step], repeats: int) -> tuple[list[float], float]:
    """Median seconds of each training step (in rotation, each settled by one untimed run) and the fp32
    matmul peak in GFLOP/s timed right after them, so that it saw much the same load of a shared machine.

    The probe is not put in the steps' rotation: its 48 MB of matrices leave the caches and the
    allocator's free pages in a state that slowed whichever step came next even after a settling run,
    and in a rotation that is one step more often than the others (the experiments index)."""
    secs = time_steps(steps, repeats, 2, settle=1)
    (s_mm,) = time_steps([matmul_probe()], max(3, repeats // 2), 1)
    return secs, 2.0 * PEAK_N**3 / s_mm / 1e9


def family_rows(repeats: int) -> list[dict[str, Any]]:
    """Tokens/s, FLOPs per token and MFU of each family's `small` preset (all timed in rotation)."""
    built = {f: (family_config(f), seqlab_step(*family_config(f))) for f in FAMILIES}
    secs, peak = timed_with_peak([step for _, (_, step) in built.values()], repeats)
    out = []
    for (family, ((cfg, batch), (model, _))), s in zip(built.items(), secs):
        rate = batch * cfg.block_size / s
        fpt = flops_per_token(model, cfg, cfg.block_size)
        out.append(row(SECTION, f"{family} small: MFU", f"seqlab {family} LM, `small` preset, training step",
                       mfu(rate, fpt, peak), "MFU", tokens_per_s=rate, flops_per_token=fpt, peak_gflops=peak,
                       params=sum(p.numel() for p in model.parameters()), batch=batch, window=cfg.block_size))
    return out


def versus_plain(mixer: str, quick: bool, repeats: int) -> list[dict[str, Any]]:
    """seqlab's LM against the plain one of equal shape (and the plain one with the fused AdamW, for scale)."""
    cfg, batch = shape_config(mixer, quick)
    model, ours = seqlab_step(cfg, batch)
    plain_cls = PlainTransformerLM if mixer == "attention" else PlainGRULM
    torch.manual_seed(0)
    plain = plain_cls(cfg)
    torch.manual_seed(0)
    plain_fused = plain_cls(cfg)
    secs, peak = timed_with_peak([ours, plain_step(plain, cfg, batch), plain_step(plain_fused, cfg, batch, fused=True)],
                                 repeats)
    rates = [batch * cfg.block_size / s for s in secs]
    fpt = flops_per_token(model, cfg, cfg.block_size)
    shape = f"{cfg.n_layer}x{cfg.n_embd}, {cfg.n_head} heads, T={cfg.block_size}, B={batch}"
    name = "attention LM" if mixer == "attention" else "GRU LM"
    sizes = {"n_layer": cfg.n_layer, "n_embd": cfg.n_embd, "window": cfg.block_size, "batch": batch,
             "params_seqlab": sum(p.numel() for p in model.parameters()),
             "params_plain": sum(p.numel() for p in plain.parameters())}
    detail = {"tokens_per_s_seqlab": rates[0], "tokens_per_s_plain": rates[1], "tokens_per_s_plain_fused_adamw":
              rates[2], "flops_per_token": fpt, "mfu_plain": mfu(rates[1], fpt, peak), "peak_gflops": peak, **sizes}
    out = [row(SECTION, f"{name} / plain", f"tokens/s of seqlab's {name} over a plain PyTorch one ({shape}; "
               "plain: torch.optim.AdamW defaults)", rates[0] / rates[1], "x",
               ">= 1.0" if mixer == "attention" else ">= 0.95", **detail),
           row(SECTION, f"{name} / plain (fused AdamW)", "the same, the plain one also with AdamW(fused=True)",
               rates[0] / rates[2], "x", **detail)]
    if mixer == "attention":
        # the MFU goal is set for the 4 x 256 shape: the quick shape's matmuls are too small to reach it
        out.append(row(SECTION, f"{name}: MFU", f"seqlab's {name} ({shape}), model FLOPs / fp32 matmul peak",
                       mfu(rates[0], fpt, peak), "MFU", "" if quick else ">= 0.6", **detail))
        out.append(row(SECTION, f"plain {name}: MFU", f"the plain {name} ({shape})", mfu(rates[1], fpt, peak),
                       "MFU", **detail))
    return out


def rows(quick: bool, threads: int) -> list[dict[str, Any]]:
    """Every throughput row, at `threads` torch threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        repeats = 3 if quick else 7
        # the rows with a goal get more repeats at the quick shape: a step there is a few tens of ms, and a
        # median of 3 moved the ratio by several percent from run to run
        versus = 15 if quick else 7
        with keep_freed_memory():  # as the trainer runs its steps (training/cpu_allocator.py)
            return [*family_rows(repeats), *versus_plain("attention", quick, versus),
                    *versus_plain("gru", quick, versus)]
    finally:
        torch.set_num_threads(before)
