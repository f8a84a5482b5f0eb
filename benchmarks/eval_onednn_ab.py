"""Whole-split evaluation with and without `models/cpu_linear.py`'s oneDNN path, side by side, against the
training step in fp32 and in bf16 autocast (the `small` preset of a family, as `seqlab bench` times it).

Prints bits per byte both ways (they should agree to about 1e-9), the speedup of the oneDNN path, and
eval / train against each training step. One thread uses CPU time (`time.process_time`), which a shared
machine disturbs less than wall time; more threads use wall time.

    python benchmarks/eval_onednn_ab.py DATA_DIR [--family attention] [--threads 1] [--rounds 7]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path

import torch

from seqlab.bench.throughput import family_config, seqlab_step
from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import load_tokenizer
from seqlab.evaluation.heldout import evaluate_lm
from seqlab.models.cpu_linear import use_onednn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--family", default="attention")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg, batch = family_config(args.family)
    tok = load_tokenizer(args.data / "tokenizer.json")
    cfg = dataclasses.replace(cfg, vocab_size=tok.vocab_size)
    model, step32 = seqlab_step(cfg, batch)
    _, step16 = seqlab_step(cfg, batch, precision="bf16")
    store = TokenStore(args.data, "val")

    def evaluate(onednn: bool) -> dict[str, float | int]:
        with use_onednn(onednn):
            return evaluate_lm(model, store, cfg.block_size, batch, torch.device("cpu"), tok)

    old, new = evaluate(False), evaluate(True)
    print(f"bits per byte: F.linear {old['bpb']:.12f}, oneDNN {new['bpb']:.12f}, "
          f"difference {new['bpb'] - old['bpb']:.2e}")
    clock = time.process_time if args.threads == 1 else time.perf_counter
    fns = {"old": lambda: evaluate(False), "new": lambda: evaluate(True), "train_fp32": step32, "train_bf16": step16}
    names = list(fns)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        for n in names[r % len(names):] + names[: r % len(names)]:
            t0 = clock()
            fns[n]()
            times[n].append(clock() - t0)
    med = {n: statistics.median(t) for n, t in times.items()}
    train = {p: batch * cfg.block_size / med[f"train_{p}"] for p in ("fp32", "bf16")}
    print(f"{args.family} small, {args.threads} thread(s), {clock.__name__}: oneDNN path "
          f"{med['old'] / med['new']:.3f}x as fast; training step bf16 / fp32 {train['bf16'] / train['fp32']:.3f}x")
    for n in ("old", "new"):
        rate = int(old["tokens"]) / med[n]
        print(f"  eval {n}: eval / train fp32 {rate / train['fp32']:.3f}x, "
              f"eval / train bf16 {rate / train['bf16']:.3f}x")


if __name__ == "__main__":
    main()
