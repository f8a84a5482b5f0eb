"""Keystroke latency by suggestion length: 3 words against up to the end of the sentence, side by side.

Per keystroke, the server's model work for one writer (as `CompletionEngine.complete` does it, without the
memory and reply proposers): the prompt encoded from the session's kept state (`PromptEncoder`), then a
greedy decoding from a copy of it (`complete_encoded`) under the expected-chars rule, the gate choosing the
words shown at threshold 0. Three ways, each with its own session, timed in alternating order keystroke by
keystroke on one torch thread:

  words3          max_words=3 (what the page asked for)
  sentence        max_words=MAX_SENTENCE_WORDS, sentence=True, value_stop=True: to the end of the sentence
                  or line, decoding stopped once no longer suggestion could be worth more
                  (`seqlab.generation.stops.ValueStop`)
  sentence_full   the same without the value stop (what the stop saves)

Goal: sentence p90 <= 15 ms (the keystroke goal, `KEPT_P90_MS`), at the worst context size.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seqlab.bench.latency_model import summary, timed
from seqlab.bench.latency_runs import KEPT_P90_MS, cut_bytes

WAYS: dict[str, dict[str, Any]] = {
    "words3": {"max_words": 3},
    "sentence": {"max_words": 12, "sentence": True, "value_stop": True},
    "sentence_full": {"max_words": 12, "sentence": True},
}


def length_runs() -> dict[str, Path]:
    """{"recipe": RUN_DIR} when the 10-minute recipe run exists (the model the keystroke goal names), else {}."""
    from seqlab.bench.proposal_speed import RECIPE_RUN

    return {"recipe": RECIPE_RUN} if (RECIPE_RUN / "manifest.json").is_file() else {}


def bench_lengths(name: str, run: Path, subject: str, body: str, contexts: tuple[int, ...],
                  keystrokes: int) -> list[dict[str, Any]]:
    """One row per context size: each way's latency summary and the words and characters it shows."""
    from seqlab.generation.complete import complete_encoded, encode_prompt
    from seqlab.generation.decode import IncrementalDecoder, context_limit
    from seqlab.generation.gate import EXPECTED_CHARS, kept_words, word_ends
    from seqlab.runs.load import load_run
    from seqlab.serving.engine import prompt_text
    from seqlab.serving.sessions import PromptEncoder

    model, tok, _ = load_run(run, "cpu")
    encoder = PromptEncoder(model)
    limit = context_limit(model)

    def keystroke(prefix: str, previous: Any, way: dict[str, Any]) -> tuple[Any, int, int]:
        """(the encoded prompt, words shown, characters shown) for one keystroke."""
        ids, allowed, skip = encode_prompt(tok, prompt_text(subject, prefix))
        encoded, _ = encoder.encode(ids, previous)
        window = torch.tensor([encoded.ids], dtype=torch.long)  # (1, W)
        decoder = IncrementalDecoder.resume(model, window, encoded.state, encoded.logits, limit, fast=encoder.fast)
        c = complete_encoded(model, tok, ids, allowed, skip, decoder=decoder, rule=EXPECTED_CHARS, **way)
        shown = kept_words(c.text, c.word_confidences, EXPECTED_CHARS, 0.0)
        return encoded, shown, (word_ends(c.text)[shown - 1] if shown else 0)

    for _ in range(3):  # warm the allocator and the caches
        keystroke(body[:200], None, WAYS["sentence"])
    rows = []
    for ctx in contexts:
        n0 = cut_bytes(body, ctx)
        previous = {w: keystroke(body[:n0], None, way)[0] for w, way in WAYS.items()}
        times: dict[str, list[float]] = {w: [] for w in WAYS}
        words: dict[str, list[int]] = {w: [] for w in WAYS}
        chars: dict[str, list[int]] = {w: [] for w in WAYS}
        for k in range(1, keystrokes + 1):
            steps: dict[str, Callable[[], Any]] = {
                w: (lambda p=body[:n0 + k], w=w, kept=previous: keystroke(p, kept[w], WAYS[w])) for w in WAYS}
            for w in (list(steps) if k % 2 else list(reversed(steps))):
                ms, (previous[w], n_words, n_chars) = timed(steps[w])
                times[w].append(ms)
                words[w].append(n_words)
                chars[w].append(n_chars)
        row = {"model": name, "context_bytes": ctx, "keystrokes": keystrokes,
               **{w: {**summary(times[w]), "words_mean": float(np.mean(words[w])),
                      "chars_mean": float(np.mean(chars[w]))} for w in WAYS},
               "same_shown": sum(a == b for a, b in zip(chars["sentence"], chars["sentence_full"]))}
        rows.append(row)
        print(f"  {name:<9} {ctx:>5} B: 3 words p90 {row['words3']['p90']:6.2f} ms ({row['words3']['chars_mean']:.1f} "
              f"chars shown), sentence p90 {row['sentence']['p90']:6.2f} ms ({row['sentence']['chars_mean']:.1f}), "
              f"without the value stop p90 {row['sentence_full']['p90']:6.2f} ms", flush=True)
    return rows


def length_goals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per model: the sentence way's worst-context p90 against the keystroke goal, and beside it (no goal) the
    3-word way's, and the characters shown per keystroke of each."""
    out = []
    for name in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == name]
        worst = {w: max(r[w]["p90"] for r in mine) for w in WAYS}
        shown = {w: float(np.mean([r[w]["chars_mean"] for r in mine])) for w in WAYS}
        out.append({"model": name, "goal": f"sentence kept p90 <= {KEPT_P90_MS:g} ms (12 words at most, worst context)",
                    "value": worst["sentence"], "unit": "ms", "pass": worst["sentence"] <= KEPT_P90_MS,
                    "words3_p90": worst["words3"], "sentence_full_p90": worst["sentence_full"],
                    "chars_shown": shown})
    return out
