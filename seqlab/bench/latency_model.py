"""Model time per keystroke: the same session (kept state) against recompute, measured side by side.

`CompletionEngine` called directly (max_words=3, greedy, no threshold), per keystroke:
  kept       the same session every keystroke (warmed with the context first): only new tokens are encoded
  recompute  session=None: the whole prompt is encoded from scratch
  enc kept / enc scratch   `engine.encoder.encode` alone, with and without the previous keystroke's state:
             the part the kept state saves (the rest is tokenizing and decoding up to 3 words)
The four are timed in alternating order keystroke by keystroke (A B C D, D C B A, ...), so they see the
same machine load. Also the summary statistics every latency row uses (`pct`, `summary`, `timed`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from seqlab.bench.latency_runs import KEPT_P90_MS, MAX_WORDS, cut_bytes


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else float("nan")


def summary(values: list[float]) -> dict[str, float]:
    return {"p50": pct(values, 50), "p90": pct(values, 90), "mean": float(np.mean(values)), "n": len(values)}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return 1000 * (time.perf_counter() - t0), out


def bench_model(name: str, run: Path, subject: str, body: str, contexts: tuple[int, ...],
                keystrokes: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of kept vs recompute (and encode-only) per context size for one model."""
    from seqlab.generation.complete import encode_prompt
    from seqlab.runs.load import load_run
    from seqlab.serving.engine import CompletionEngine, prompt_text

    model, tok, _ = load_run(run, "cpu")
    engine = CompletionEngine(model, tok, threshold=0.0)
    info = engine.describe()
    summary_json = json.loads((run / "run.json").read_text()).get("summary", {})
    info.update(steps=summary_json.get("steps"), best_val_loss=summary_json.get("best_val_loss"))

    def ids_of(prefix: str) -> list[int]:
        return encode_prompt(tok, prompt_text(subject, prefix))[0]

    for _ in range(3):  # first calls allocate and warm the caches of the allocator
        engine.complete(body[:200], subject, None, max_words=MAX_WORDS)
    rows = []
    for ctx in contexts:
        n0 = cut_bytes(body, ctx)
        sid = f"bench-{name}-{ctx}"
        engine.complete(body[:n0], subject, sid, max_words=MAX_WORDS)  # the session holds the context
        engine.complete(body[:n0], subject, None, max_words=MAX_WORDS)
        enc_prev, _ = engine.encoder.encode(ids_of(body[:n0]))
        times: dict[str, list[float]] = {"kept": [], "recompute": [], "enc_kept": [], "enc_scratch": []}
        reused, words, same = [], [], 0
        for k in range(1, keystrokes + 1):
            prefix = body[:n0 + k]
            ids = ids_of(prefix)
            results: dict[str, Any] = {}
            steps: dict[str, Callable[[], Any]] = {
                "kept": lambda p=prefix, s=sid: engine.complete(p, subject, s, max_words=MAX_WORDS),
                "recompute": lambda p=prefix: engine.complete(p, subject, None, max_words=MAX_WORDS),
                "enc_kept": lambda i=ids, e=enc_prev: engine.encoder.encode(i, e),
                "enc_scratch": lambda i=ids: engine.encoder.encode(i),
            }
            order = list(steps) if k % 2 else list(reversed(steps))
            for key in order:
                ms, results[key] = timed(steps[key])
                times[key].append(ms)
            enc_prev = results["enc_kept"][0]
            reused.append(results["kept"].reused_tokens)
            words.append(results["kept"].words)
            same += results["kept"].text == results["recompute"].text
        kept, rec = summary(times["kept"]), summary(times["recompute"])
        row = {"model": name, "context_bytes": ctx, "prompt_tokens": len(ids_of(body[:n0])),
               "keystrokes": keystrokes, **{k: summary(v) for k, v in times.items()},
               "speedup_p50": rec["p50"] / kept["p50"], "speedup_p90": rec["p90"] / kept["p90"],
               "reused_tokens_p50": pct(reused, 50), "words_mean": float(np.mean(words)),
               "same_suggestion": same, "kept_p90_pass": kept["p90"] <= KEPT_P90_MS}
        rows.append(row)
        print(f"  {name:<9} {ctx:>5} B: kept p50 {kept['p50']:6.2f} ms, recompute p50 {rec['p50']:7.2f} ms",
              flush=True)
    return rows, info
