"""Evaluation speed against training speed ("evaluation" rows).

`evaluate_lm` scores every target of a split once, batched and under `torch.inference_mode()`
(`seqlab.evaluation.heldout`, cut into calls by `seqlab.evaluation.plans`). Its tokens/s (scored
targets per second) is compared with the training step's tokens/s of the same model on
the same machine, the two timed in turn (median of 5 rounds after a warm-up; a training sample is 8 steps
in a row). Evaluation reads `EVAL_BATCH` rows a call, as `seqlab eval` does; training, the preset's batch.
Goal: evaluation >= 3x training,
for attention (the `small` preset's RoPE: a key/value cache slides over whole-email lanes, each chunk
of W/2 tokens reading the W/2 before it) and a GRU (whole-email lanes, the hidden state carried).

The goal row compares evaluation as `seqlab eval` runs it for a `small` run trained on this machine (in
the run's own precision, `seqlab.bench.bf16.default_precision`: fp32, or bf16 autocast where
train.precision=auto resolves to bf16) with the training step the trainer runs by default (the same
precision). On a CPU with bf16 instructions the other precision's step and evaluation are timed in the same
rotation and given as informative rows (float32 evaluation, `seqlab eval --precision fp32`, is the exact
one), with the bits per byte of both evaluations. A forward pass is about a third of a training step's FLOPs.
A second row counts every position the model computes (padding included). For attention a last row
compares, side by side, the sliding cache with the half-overlapping windows that learned positions still
use (and that every attention model used before): those compute each position about twice, since only the
second half of a window is new.

The saved-characters typing of `seqlab eval` (a proposal at every typed letter) has its own rows,
`seqlab.bench.proposal_speed`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from seqlab.bench.bf16 import default_precision
from seqlab.bench.harness import Step, row, time_steps
from seqlab.bench.throughput import family_config, seqlab_step
from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import load_tokenizer
from seqlab.evaluation.heldout import EVAL_BATCH, evaluate_lm, score_heldout, score_split, token_byte_lengths
from seqlab.evaluation.plans import iter_windows, split_plan
from seqlab.runs.precision import autocast_for, cpu_has_native_bf16

CPU = torch.device("cpu")


def family_rows(family: str, data: Path, split: str) -> list[dict[str, Any]]:
    """The evaluation rows of one family's `small` preset on `split` (module docstring)."""
    cfg, batch = family_config(family)
    tok = load_tokenizer(data / "tokenizer.json")
    cfg = dataclasses.replace(cfg, vocab_size=tok.vocab_size)
    model, step = seqlab_step(cfg, batch)
    _, step16 = seqlab_step(cfg, batch, precision="bf16")
    bf16 = cpu_has_native_bf16()
    store = TokenStore(data, split)
    plan = split_plan(model, store, cfg.block_size, EVAL_BATCH, tok.pad_id)
    fed = sum(c.x.numel() for c in plan.chunks)  # positions the model computes, padding included
    result: dict[str, Any] = {}

    def evaluate() -> None:
        result.update(evaluate_lm(model, store, cfg.block_size, EVAL_BATCH, CPU, tok))

    def evaluate16() -> None:  # seqlab eval (and the trainer's validation) of a run trained in bf16
        result["bpb_bf16"] = score_split(model, store, cfg.block_size, EVAL_BATCH, CPU, tok,
                                         autocast=autocast_for("bf16", CPU)).bpb

    def windows() -> None:  # the half-overlapping windows, for the side-by-side row
        score_heldout(model, iter_windows(store, cfg.block_size, EVAL_BATCH, tok.pad_id, 0), token_byte_lengths(tok),
                      CPU)

    # A training step is much shorter than an evaluation of the split, and one step alone varies a lot from
    # round to round on shared cores: it is timed as TRAIN_BURST steps in a row, so that each sample is
    # about as long as an evaluation.
    burst, burst16 = _burst(step), _burst(step16)
    steps = [burst, evaluate, *([burst16, evaluate16] if bf16 else []), *([windows] if plan.kind == "sliding" else [])]
    secs = time_steps(steps, 5, 1)
    secs[0] /= TRAIN_BURST
    if bf16:
        secs[2] /= TRAIN_BURST
    nan = float("nan")
    times = {"train_fp32": secs.pop(0), "eval": secs.pop(0), "train_bf16": secs.pop(0) if bf16 else nan,
             "eval_bf16": secs.pop(0) if bf16 else nan, "windows": secs.pop(0) if secs else nan}
    return speed_rows(family, split, plan.kind, batch * cfg.block_size, fed, result, times)


TRAIN_BURST = 8  # training steps per timed sample


def _burst(step: Step) -> Step:
    """TRAIN_BURST calls of `step` as one timed thing."""

    def run() -> None:
        for _ in range(TRAIN_BURST):
            step()

    return run


def speed_rows(family: str, split: str, kind: str, step_tokens: int, fed: int, result: dict[str, Any],
          times: dict[str, float]) -> list[dict[str, Any]]:
    """The rows from the medians `times` (seconds of each timed thing) and the evaluation's `result`."""
    rate = {p: step_tokens / times[f"train_{p}"] for p in ("fp32", "bf16")}
    eval_rate = {"fp32": result["tokens"] / times["eval"], "bf16": result["tokens"] / times["eval_bf16"]}
    default = default_precision()
    eval_s = times["eval" if default == "fp32" else "eval_bf16"]  # the evaluation seqlab eval runs here
    detail = {"plan": kind, "eval_tokens": result["tokens"], "eval_positions": fed, "eval_precision": default,
              "eval_s": eval_s, "eval_fp32_s": times["eval"], "positions_per_s_eval": fed / eval_s,
              "tokens_per_s_eval": eval_rate[default], "tokens_per_s_eval_fp32": eval_rate["fp32"],
              "tokens_per_s_train": rate[default], "train_precision": default,
              "tokens_per_s_train_fp32": rate["fp32"], "tokens_per_s_train_bf16": rate["bf16"],
              "bpb_fp32": result["bpb"], "bpb_bf16": result.get("bpb_bf16", float("nan"))}
    name = f"{family} small"
    out = [row("evaluation", f"{name}: eval / train", f"scored tokens/s of evaluate_lm over the whole {split} split "
               f"({kind} plan, evaluation/plans.py; {default}, as seqlab eval runs a run trained here) against the "
               f"default ({default}) training step's tokens/s, same model, {EVAL_BATCH} rows a call against the "
               "training batch, timed in turn", eval_rate[default] / rate[default], "x", ">= 3.0", **detail),
           row("evaluation", f"{name}: positions eval / train", "the same counting every position the model "
               "computes (padding included)", fed / eval_s / rate[default], "x", **detail)]
    if default == "bf16":
        out.append(row("evaluation", f"{name}: fp32 eval / train", "the exact float32 evaluation (seqlab eval "
                       "--precision fp32) against the same default training step; bits per byte of both "
                       "evaluations in detail", eval_rate["fp32"] / rate[default], "x", **detail))
    elif "bpb_bf16" in result:
        out.append(row("evaluation", f"{name}: bf16 eval / bf16 train", "evaluation under bf16 autocast against "
                       "the bf16 training step (not this machine's default); bits per byte of both in detail",
                       eval_rate["bf16"] / rate["bf16"], "x", **detail))
    if kind == "sliding":
        out.append(row("evaluation", f"{name}: sliding / windows", "evaluate_lm's sliding key/value cache "
                       "against the half-overlapping windows (learned positions' plan) on the same split, scored "
                       "tokens/s, float32, timed in turn", times["windows"] / times["eval"], "x",
                       windows_s=times["windows"], **detail))
    return out


def rows(data: Path, threads: int, quick: bool = False) -> list[dict[str, Any]]:
    """The rows of each family, then the saved-characters typing's (`proposal_speed`: its proposals batched
    against one by one, and its time against the recipe's training minutes) and, unless `quick`, the time of
    `seqlab eval --dynamic` against the same minutes (`dynamic_speed`: minutes of its own)."""
    from seqlab.bench import dynamic_speed, proposal_speed

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out = [r for f in ("attention", "gru") for r in family_rows(f, data, "val")]
    finally:
        torch.set_num_threads(before)
    out += proposal_speed.rows(data.parent, threads)
    return out if quick else out + dynamic_speed.rows(data.parent, threads)
