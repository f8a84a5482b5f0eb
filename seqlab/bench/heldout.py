"""Evaluation speed against training speed ("evaluation" rows).

`evaluate_lm` scores every target of a split once, batched and under `torch.inference_mode()`
(`seqlab.evaluation.heldout`). Its tokens/s (scored targets per second) is compared with the training
step's tokens/s of the same model and batch size on the same machine, one after the other. Goal:
evaluation >= 3x training, for attention (overlapping windows) and a GRU (whole-email lanes). A forward
pass is about a third of a training step's FLOPs, and attention's windows overlap by half (each target is
scored with at least half a window of context, `seqlab.evaluation.heldout`), so its scored rate is about half
of the positions it computes: a second row counts those.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from seqlab.bench.common import row, time_steps
from seqlab.bench.throughput import family_config, seqlab_step
from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import load_tokenizer
from seqlab.evaluation.heldout import evaluate_lm, heldout_batches


def family_rows(family: str, data: Path, split: str) -> list[dict[str, Any]]:
    cfg, batch = family_config(family)
    tok = load_tokenizer(data / "tokenizer.json")
    cfg.vocab_size = tok.vocab_size
    model, step = seqlab_step(cfg, batch)
    (s_train,) = time_steps([step], 3, 1)
    train_rate = batch * cfg.block_size / s_train
    store = TokenStore(data, split)
    # positions the model computes: attention windows overlap by half, so about twice the scored targets
    fed = sum(x.numel() for _, x, _ in heldout_batches(model, store, cfg.block_size, batch, tok.pad_id))
    t0 = time.perf_counter()
    r = evaluate_lm(model, store, cfg.block_size, batch, "cpu", tok)
    eval_s = time.perf_counter() - t0
    eval_rate = r["tokens"] / eval_s
    detail = {"eval_tokens": r["tokens"], "eval_positions": fed, "eval_s": eval_s, "tokens_per_s_eval": eval_rate,
              "positions_per_s_eval": fed / eval_s, "tokens_per_s_train": train_rate}
    return [row("evaluation", f"{family} small: eval / train", f"scored tokens/s of evaluate_lm over the whole "
                f"{split} split against the training step's tokens/s, same model and batch", eval_rate / train_rate,
                "x", ">= 3.0", **detail),
            row("evaluation", f"{family} small: positions eval / train", "the same counting every position the "
                "model computes (padding and the re-read half of overlapping windows included)",
                fed / eval_s / train_rate, "x", **detail)]


def rows(data: Path, threads: int) -> list[dict[str, Any]]:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return [r for f in ("attention", "gru") for r in family_rows(f, data, "val")]
    finally:
        torch.set_num_threads(before)
