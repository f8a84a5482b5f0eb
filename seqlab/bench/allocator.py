"""The trainer's allocator setting on and off ("throughput" rows `<model>: freed memory kept`).

`seqlab.training.cpu_allocator.keep_freed_memory` makes glibc keep the memory a training step frees for the
next step. What it saves depends on the state of the heap, which a process keeps: once one step ran with
the setting, the blocks it left free are reused by later steps without it, so the two cannot be timed
alternately in one process. Each side is therefore its own fresh interpreter (`python -m
seqlab.bench.allocator MODEL KEPT STEPS`), started alternately, that times the trainer's step as the
throughput rows do and prints the median; the row is the ratio of the medians of those medians.

Models: the attention LM of the comparison shape (`throughput.shape_config`) and the recipe table's GRU at
width 192 (32 lanes of 64 tokens, BPE 1,024), the model `seqlab train DATA --minutes 10` trains most often.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from typing import Any

import torch

from seqlab.bench.harness import row
from seqlab.bench.throughput import SECTION, seqlab_step, shape_config
from seqlab.config import ModelConfig
from seqlab.studies.recipe_measure import candidate_config
from seqlab.training.cpu_allocator import applies, keep_freed_memory

MODELS = ("attention", "recipe")
RECIPE = "gru-192"  # the recipe table's most common choice (seqlab/training/recipe_table.json)


def model_of(name: str, quick: bool) -> tuple[str, ModelConfig, int]:
    """(row label, config, batch) of a model this row times."""
    if name == "attention":
        return "attention LM", *shape_config("attention", quick)
    cfg = candidate_config(RECIPE, "cpu-fp32", 1024, [])  # the table's BPE 1,024; the step here runs in fp32
    return f"{RECIPE} recipe", cfg.model, cfg.train.batch_size


def child(name: str, kept: bool, steps: int, quick: bool, threads: int) -> float:
    """In a fresh interpreter: the median seconds of `steps` training steps after 3 of warm-up."""
    torch.set_num_threads(threads)
    _, cfg, batch = model_of(name, quick)
    _, step = seqlab_step(cfg, batch)
    with keep_freed_memory(kept):
        for _ in range(3):
            step()
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def spawn(name: str, kept: bool, steps: int, quick: bool, threads: int) -> float:
    args = [sys.executable, "-m", "seqlab.bench.allocator", name, str(int(kept)), str(steps), str(int(quick)),
            str(threads)]
    done = subprocess.run(args, capture_output=True, text=True, check=True, timeout=600)
    return float(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])


def rows(quick: bool, threads: int) -> list[dict[str, Any]]:
    """One row per model, each side run `rounds` times alternately; none where the C library is not glibc."""
    if not applies():
        return []
    rounds, steps = (2, 5) if quick else (3, 6)
    out = []
    for name in MODELS:
        label, cfg, batch = model_of(name, quick)
        secs: dict[bool, list[float]] = {True: [], False: []}
        for r in range(rounds):
            for kept in ((True, False) if r % 2 else (False, True)):
                secs[kept].append(spawn(name, kept, steps, quick, threads))
        s_kept, s_returned = statistics.median(secs[True]), statistics.median(secs[False])
        out.append(row(SECTION, f"{label}: freed memory kept", "training step with freed memory returned to the "
                       "kernel (glibc's default) over kept for the next step (the trainer's setting), each side "
                       "in fresh interpreters", s_returned / s_kept, "x", seconds_kept=s_kept,
                       seconds_returned=s_returned, batch=batch, window=cfg.block_size, n_embd=cfg.n_embd,
                       n_layer=cfg.n_layer, rounds=rounds, steps=steps))
    return out


if __name__ == "__main__":
    model, kept_arg, steps_arg, quick_arg, threads_arg = sys.argv[1:6]
    seconds = child(model, kept_arg == "1", int(steps_arg), quick_arg == "1", int(threads_arg))
    print(json.dumps({"seconds": seconds}))
