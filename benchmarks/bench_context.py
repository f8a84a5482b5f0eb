"""What reading the message being answered is worth: one model family with and without cross-attention.

For each corpus (prepared DATA_DIRs given with --data NAME=DIR, e.g. the synthetic corpus and the
SpamAssassin ham), the same attention model is trained twice for the same wall-clock budget
(`train.max_minutes`): once plain, once with `model.cross_attention=true` (the context encoder and a
cross-attention in every block, fed each email's context). Both are then scored on every target of the
test split, per email (`seqlab.evaluation.context_scores.email_scores`), and compared on the same emails:

- bits per byte on the replies (emails with a context) and on the rest, each model;
- the difference (context - plain) on the replies with a 95% paired bootstrap interval over emails;
- ExactMatch@1..3 at every sampled word boundary (no threshold) of up to --em-emails replies, each model
  reading what it can (the context model its email's context).

Conditions are printed with the result: steps and tokens each run reached in its budget (the cores are
shared, so equal time is not equal work; the context model also spends time encoding contexts).

    python benchmarks/bench_context.py --data synth=out/data-synth --data sa=out/data-sa --out out/bench_context \\
        [--minutes 3] [--em-emails 40] [model.n_embd=64 ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from seqlab.config import apply_overrides, get_preset
from seqlab.data.store import TokenStore
from seqlab.evaluation.compressors import split_texts
from seqlab.evaluation.context_scores import email_scores, paired_bootstrap
from seqlab.evaluation.exact_match import completion_quality
from seqlab.models.context import ContextBatch
from seqlab.runs.load import load_run
from seqlab.training.trainer import train

BASE = ["model.n_layer=2", "model.n_embd=64", "model.n_head=4", "model.block_size=64", "model.ctx_block_size=128",
        "train.batch_size=16", "train.max_steps=100000", "train.eval_every=100", "train.ckpt_every=100000",
        "train.log_every=50", "train.threads=1"]


def _train(data: Path, run: Path, minutes: float, extra: list[str]) -> dict:
    if (run / "run.json").exists() and "summary" in json.loads((run / "run.json").read_text()):
        return json.loads((run / "run.json").read_text())["summary"]
    budget = [] if any(e.startswith("train.max_steps=") for e in extra) else [f"train.max_minutes={minutes}"]
    cfg = apply_overrides(get_preset("tiny"), [*BASE, *budget, *extra])
    return train(data, run, cfg, progress=False)


def _exact_match(run: Path, store: TokenStore, emails: np.ndarray, seed: int) -> dict:
    model, tok, cfg = load_run(run, "cpu")
    texts = split_texts(store, tok, emails)
    contexts = None
    if cfg.model.cross_attention:
        assert store.contexts is not None
        contexts = [ContextBatch.from_lists([store.contexts.context(int(i), cfg.model.ctx_block_size).tolist()])
                    for i in emails]
    q = completion_quality(model, tok, texts, max_words=3, threshold=0.0, positions_per_email=3, seed=seed,
                           contexts=contexts)
    return {"exact_match": q["exact_match"], "counts": q["exact_match_counts"], "positions": q["positions"]}


def measure(name: str, data: Path, out: Path, minutes: float, em_emails: int, extra: list[str],
            equal_steps: bool = False) -> dict:
    runs = {"plain": out / f"{name}-plain", "context": out / f"{name}-context"}
    summaries = {"plain": _train(data, runs["plain"], minutes, extra),
                 "context": _train(data, runs["context"], minutes, ["model.cross_attention=true", *extra])}
    if equal_steps:  # also the context model given the plain model's steps (no time budget)
        runs["context_steps"] = out / f"{name}-context-steps"
        summaries["context_steps"] = _train(data, runs["context_steps"], minutes, [
            "model.cross_attention=true", *extra, f"train.max_steps={summaries['plain']['steps']}"])
    store = TokenStore(data, "test")
    scores = {}
    for kind, run in runs.items():
        model, tok, cfg = load_run(run, "cpu")
        scores[kind] = email_scores(model, store, cfg.model.block_size, 32, torch.device("cpu"), tok)
    has = scores["context"].has_context
    result = {"corpus": name, "data": str(data), "test_emails": int(store.num_emails), "replies": int(has.sum()),
              "train": {k: {key: s[key] for key in ("steps", "tokens", "elapsed_s", "params")}
                        for k, s in summaries.items()}}
    for kind, s in scores.items():
        result[kind] = {"bpb_replies": s.bpb(has), "bpb_others": s.bpb(~has), "bpb_all": s.bpb()}
    result["diff_replies"] = paired_bootstrap(scores["context"], scores["plain"], has, samples=4000)
    result["diff_others"] = paired_bootstrap(scores["context"], scores["plain"], ~has, samples=4000)
    if equal_steps:
        result["steps_diff_replies"] = paired_bootstrap(scores["context_steps"], scores["plain"], has, samples=4000)
        result["steps_diff_others"] = paired_bootstrap(scores["context_steps"], scores["plain"], ~has, samples=4000)
    rng = np.random.default_rng([7])
    replies = np.flatnonzero(has)
    picked = np.sort(rng.choice(replies, size=min(em_emails, len(replies)), replace=False))
    result["exact_match_replies"] = {kind: _exact_match(run, store, picked, seed=3) for kind, run in runs.items()}
    return result


def _table(results: list[dict]) -> str:
    lines = [f"{'corpus':8} {'replies':>7} {'plain bpb':>9} {'ctx bpb':>8} {'ctx - plain [95% CI]':>28} "
             f"{'others: ctx - plain':>20} {'EM@1 plain/ctx':>15} {'steps plain/ctx':>16}"]
    for r in results:
        d, o = r["diff_replies"], r["diff_others"]
        em = r["exact_match_replies"]
        em1 = "/".join(f"{100 * (em[k]['exact_match']['1'] or 0):.1f}%" for k in ("plain", "context"))
        steps = "/".join(str(r["train"][k]["steps"]) for k in ("plain", "context"))
        lines.append(f"{r['corpus']:8} {r['replies']:>7} {r['plain']['bpb_replies']:9.3f} "
                     f"{r['context']['bpb_replies']:8.3f} {d['diff']:+9.3f} [{d['low']:+.3f}, {d['high']:+.3f}] "
                     f"{o['diff']:+20.3f} {em1:>15} {steps:>16}")
        if "steps_diff_replies" in r:
            d, o = r["steps_diff_replies"], r["steps_diff_others"]
            em1 = "/".join(f"{100 * (em[k]['exact_match']['1'] or 0):.1f}%" for k in ("plain", "context_steps"))
            lines.append(f"{'  =steps':8} {r['replies']:>7} {r['plain']['bpb_replies']:9.3f} "
                         f"{r['context_steps']['bpb_replies']:8.3f} {d['diff']:+9.3f} [{d['low']:+.3f}, "
                         f"{d['high']:+.3f}] {o['diff']:+20.3f} {em1:>15} "
                         f"{r['train']['plain']['steps']}/{r['train']['context_steps']['steps']:>7}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", action="append", required=True, help="NAME=DATA_DIR (repeatable)")
    p.add_argument("--out", type=Path, default=Path("out/bench_context"))
    p.add_argument("--minutes", type=float, default=3.0, help="training budget of each run")
    p.add_argument("--em-emails", type=int, default=40, help="replies whose word boundaries ExactMatch samples")
    p.add_argument("--equal-steps", action="store_true",
                   help="also train the context model for the plain model's steps (equal work, not equal time)")
    p.add_argument("overrides", nargs="*", help="extra key=value config overrides for both runs")
    args = p.parse_args(argv)
    results = []
    for item in args.data:
        name, _, folder = item.partition("=")
        results.append(measure(name, Path(folder), args.out, args.minutes, args.em_emails, args.overrides,
                               args.equal_steps))
        print(_table(results[-1:]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(_table(results))
    print(f"torch threads 1, {args.minutes} min per run, conditions and counts in {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
