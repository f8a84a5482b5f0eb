"""Where held-out evaluation spends its time, against the training step of the same model (torch.profiler).

Scores a whole split with `evaluate_lm` (the plan `seqlab eval` uses) and runs the training step the
`seqlab bench` evaluation rows compare it with (the family's `small` preset and batch, random tokens),
then splits each one's time into categories: matrix multiplies, the fused attention kernel, GELU,
LayerNorm, log-softmax and NLL, RoPE, copies into the key/value cache, masks, lane bookkeeping (the
state of ended emails dropped), residual adds, other operators, and Python between operators (the
profiled wall time no operator accounts for; it includes the profiler's own cost per operator).

Shares come from the profiler's self CPU time; microseconds per token are those shares of the unprofiled
CPU time (`time.process_time`, one thread), which a shared machine disturbs less than wall time. The
categories are told apart by operator name and input shape, so they are approximate: a concatenation's
inputs have no recorded shape and count as "other".

    python benchmarks/profile_eval.py DATA_DIR [--split val] [--family attention] [--threads 1]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from seqlab.bench.throughput import family_config, seqlab_step
from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import load_tokenizer
from seqlab.evaluation.heldout import evaluate_lm

MASK_OPS = {"aten::triu", "aten::full", "aten::where", "aten::isneginf", "aten::all", "aten::masked_fill",
            "aten::masked_fill_", "aten::remainder", "aten::le", "aten::ge", "aten::__and__", "aten::rsub",
            "aten::arange"}
ELEMENTWISE = {"aten::mul", "aten::mul_", "aten::sub", "aten::sub_", "aten::neg", "aten::add", "aten::add_"}


def category(key: str, shapes: list[Any], half_head: int) -> str:
    """The category of one operator from its name and its inputs' shapes (module docstring)."""
    dims = max((len(s) for s in shapes if isinstance(s, (list, tuple))), default=0)
    last = next((s[-1] for s in shapes if isinstance(s, (list, tuple)) and s), None)
    named = {"aten::mm": "matmul", "aten::addmm": "matmul", "aten::bmm": "matmul", "aten::gelu": "GELU",
             "aten::gelu_backward": "GELU", "aten::_log_softmax": "log-softmax + NLL",
             "aten::_log_softmax_backward_data": "log-softmax + NLL",
             "mkldnn::_linear_pointwise": "matmul"}  # oneDNN's inference linear (models/cpu_linear.py), GELU fused
    if key in named:
        return named[key]
    if "scaled_dot_product" in key or "flash" in key:
        return "attention kernel"
    if "nll_loss" in key:
        return "log-softmax + NLL"
    if "layer_norm" in key:
        return "LayerNorm"
    if key in ELEMENTWISE and dims >= 4:  # (B, H, T, D/2) halves, (B, T, 2, H, D/2) complex pairs
        return "RoPE"
    if key == "aten::cat" and dims == 4:
        return "RoPE" if last == half_head else "KV cache, 4-D copies"
    if key == "aten::copy_" and dims == 4:
        return "KV cache, 4-D copies"
    if key == "aten::index_select":
        return "RoPE" if dims == 2 else "lane bookkeeping"  # (3C, C) weight rows paired for RoPE
    if key in MASK_OPS:
        return "masks"
    if key == "aten::add" and dims == 3:
        return "residual adds"
    return "other operators"


def breakdown(run: Callable[[], Any], tokens: int, half_head: int, repeats: int = 3) -> tuple[float, dict[str, float]]:
    """(unprofiled CPU seconds per token, {category: share}) of `run`, which handles `tokens` tokens."""
    run()
    cpu = []
    for _ in range(repeats):
        t0 = time.process_time()
        run()
        cpu.append(time.process_time() - t0)
    shares: collections.Counter[str] = collections.Counter()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        t0 = time.perf_counter()
        run()
        wall = time.perf_counter() - t0
    for a in prof.key_averages(group_by_input_shape=True):
        shares[category(a.key, a.input_shapes, half_head)] += a.self_cpu_time_total * 1e-6
    shares["Python between operators"] = max(0.0, wall - sum(shares.values()))
    total = sum(shares.values())
    return sorted(cpu)[len(cpu) // 2] / tokens, {k: v / total for k, v in shares.most_common()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--split", default="val")
    ap.add_argument("--family", default="attention")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg, batch = family_config(args.family)
    tok = load_tokenizer(args.data / "tokenizer.json")
    cfg = dataclasses.replace(cfg, vocab_size=tok.vocab_size)
    model, step = seqlab_step(cfg, batch)
    store = TokenStore(args.data, args.split)
    scored = int(evaluate_lm(model, store, cfg.block_size, batch, torch.device("cpu"), tok)["tokens"])
    half = cfg.n_embd // cfg.n_head // 2
    steps = 8
    rows = {"eval": breakdown(lambda: evaluate_lm(model, store, cfg.block_size, batch, torch.device("cpu"), tok),
                              scored, half),
            "train": breakdown(lambda: [step() for _ in range(steps)], steps * batch * cfg.block_size, half)}
    (e_s, e), (t_s, t) = rows["eval"], rows["train"]
    print(f"{args.family} small, {torch.get_num_threads()} thread(s): eval {1 / e_s:,.0f} scored tokens/s, "
          f"train {1 / t_s:,.0f} tokens/s of CPU time: eval / train {t_s / e_s:.2f}x")
    print(f"{'category':28s} {'eval %':>7s} {'us/token':>9s} {'train %':>8s} {'us/token':>9s}")
    for k in sorted(set(e) | set(t), key=lambda k: -e.get(k, 0.0)):
        ev, tr = e.get(k, 0.0), t.get(k, 0.0)
        print(f"{k:28s} {100 * ev:6.1f}% {ev * e_s * 1e6:9.2f} {100 * tr:7.1f}% {tr * t_s * 1e6:9.2f}")


if __name__ == "__main__":
    main()
