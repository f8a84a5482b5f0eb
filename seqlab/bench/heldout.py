"""Evaluation speed against training speed ("evaluation" rows).

`evaluate_lm` scores every target of a split once, batched and under `torch.inference_mode()`
(`seqlab.evaluation.heldout`, cut into calls by `seqlab.evaluation.plans`). Its tokens/s (scored
targets per second) is compared with the training step's tokens/s of the same model and batch size on
the same machine, the two timed in turn (median of 3 after a warm-up). Goal: evaluation >= 3x training,
for attention (the `small` preset's RoPE: a key/value cache slides over whole-email lanes, each chunk
of W/2 tokens reading the W/2 before it) and a GRU (whole-email lanes, the hidden state carried).

A forward pass is about a third of a training step's FLOPs. A second row counts every position the
model computes (padding included). For attention a third row compares, side by side, the sliding cache
with the half-overlapping windows that learned positions still use (and that every attention model
used before): those compute each position about twice, since only the second half of a window is new.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from seqlab.bench.common import row, time_steps
from seqlab.bench.throughput import family_config, seqlab_step
from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import load_tokenizer
from seqlab.evaluation.heldout import evaluate_lm, score_heldout, token_byte_lengths
from seqlab.evaluation.plans import iter_windows, split_plan

CPU = torch.device("cpu")


def family_rows(family: str, data: Path, split: str) -> list[dict[str, Any]]:
    cfg, batch = family_config(family)
    tok = load_tokenizer(data / "tokenizer.json")
    cfg.vocab_size = tok.vocab_size
    model, step = seqlab_step(cfg, batch)
    store = TokenStore(data, split)
    plan = split_plan(model, store, cfg.block_size, batch, tok.pad_id)
    fed = sum(c.x.numel() for c in plan.chunks)  # positions the model computes, padding included
    result: dict[str, Any] = {}

    def evaluate() -> None:
        result.update(evaluate_lm(model, store, cfg.block_size, batch, CPU, tok))

    def windows() -> None:  # the half-overlapping windows, for the side-by-side row
        score_heldout(model, iter_windows(store, cfg.block_size, batch, tok.pad_id, 0), token_byte_lengths(tok), CPU)

    steps = [step, evaluate] + ([windows] if plan.kind == "sliding" else [])
    s_train, eval_s, *rest = time_steps(steps, 3, 1)
    train_rate = batch * cfg.block_size / s_train
    eval_rate = result["tokens"] / eval_s
    detail = {"plan": plan.kind, "eval_tokens": result["tokens"], "eval_positions": fed, "eval_s": eval_s,
              "tokens_per_s_eval": eval_rate, "positions_per_s_eval": fed / eval_s, "tokens_per_s_train": train_rate}
    out = [row("evaluation", f"{family} small: eval / train", f"scored tokens/s of evaluate_lm over the whole {split} "
               f"split ({plan.kind} plan, evaluation/plans.py) against the training step's tokens/s, same model and "
               "batch, timed in turn", eval_rate / train_rate, "x", ">= 3.0", **detail),
           row("evaluation", f"{family} small: positions eval / train", "the same counting every position the model "
               "computes (padding included)", fed / eval_s / train_rate, "x", **detail)]
    if rest:
        out.append(row("evaluation", f"{family} small: sliding / windows", "evaluate_lm's sliding key/value cache "
                       "against the half-overlapping windows (learned positions' plan) on the same split, scored "
                       "tokens/s, timed in turn", rest[0] / eval_s, "x", windows_s=rest[0], **detail))
    return out


def rows(data: Path, threads: int) -> list[dict[str, Any]]:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return [r for f in ("attention", "gru") for r in family_rows(f, data, "val")]
    finally:
        torch.set_num_threads(before)
