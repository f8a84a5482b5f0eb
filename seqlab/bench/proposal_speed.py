"""Speed of the saved-characters typing: proposals at every typed letter, batched against one by one.

`seqlab eval` types each of 100 test emails (its first 50 body words) and asks the model's greedy,
unthresholded proposal after every typed character (`seqlab.evaluation.saved_chars`): about 27k proposals
for the recipe's SpamAssassin split. Two rows of the "evaluation" section:

- batched / one by one: `propose_positions` (`seqlab.generation.batched`: each email's prompts encoded
  once through a prefix trunk, decoded in lanes) against `complete` called at each position, on the same
  `SAMPLE` emails, timed in turn (median of 3), with how many proposals differ (should be 0);
- the goal: `propose_positions` over every position of the 100 emails `seqlab eval` types, once, as a share
  of the recipe's training minutes (goal <= 25%).

The model is the 10-minute recipe run (`RECIPE_RUN` on `RECIPE_DATA`'s test split) when it exists, else the
latency benchmark's GRU (`seqlab.bench.latency_runs`, the `small` preset trained 2 minutes on the synthetic
corpus, its budget taken as the training minutes). One torch thread per `threads`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from seqlab.bench.harness import row, time_pair
from seqlab.data.store import TokenStore
from seqlab.evaluation.saved_chars import typed_span
from seqlab.evaluation.scored_emails import completion_texts
from seqlab.generation.batched import propose_positions
from seqlab.generation.complete import Completion, complete
from seqlab.generation.gate import FIRST_WORD
from seqlab.runs.load import load_run

RECIPE_RUN, RECIPE_DATA = Path("out/recipe10"), Path("out/data-sa")
EMAILS, WORDS, MAX_WORDS, SEED = 100, 50, 3, 0  # what seqlab eval types (its defaults)
SAMPLE = 3  # emails timed both ways (one by one costs seconds per email)
GOAL_SHARE = 25.0  # % of the training minutes


def every_letter(text: str) -> list[int]:
    """Offsets after every typed character of the part of `text` a writer types (`typed_span`)."""
    start, end = typed_span(text, WORDS)
    return list(range(start + 1, end + 1))


def model_source(cache: Path) -> tuple[Path, Path, float, str]:
    """(RUN_DIR, DATA_DIR, training seconds, label): the recipe run, else the latency benchmark's GRU."""
    if (RECIPE_RUN / "manifest.json").is_file() and (RECIPE_DATA / "meta.json").is_file():
        minutes = json.loads((RECIPE_RUN / "run.json").read_text()).get("recipe", {}).get("minutes", 10.0)
        return RECIPE_RUN, RECIPE_DATA, 60.0 * float(minutes), "recipe"
    from seqlab.bench.latency_runs import ensure_runs

    data, runs = ensure_runs(cache, quick=False)
    return runs["gru"], data, 120.0, "latency gru (small, 2 min)"


def _differ(a: list[list[Completion]], b: list[list[Completion]]) -> int:
    """Proposals whose text or ids differ between two answers to the same positions."""
    return sum(x.text != y.text or x.ids != y.ids for xs, ys in zip(a, b) for x, y in zip(xs, ys))


def rows(cache: Path, threads: int) -> list[dict[str, Any]]:
    """The two rows of the module docstring."""
    run, data, train_s, label = model_source(cache)
    model, tok, _ = load_run(run, "cpu")
    texts = completion_texts(TokenStore(data, "test"), tok, EMAILS, SEED)
    positions = [every_letter(t) for t in texts]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        sample_t, sample_p = texts[:SAMPLE], positions[:SAMPLE]
        got: dict[str, list[list[Completion]]] = {}

        def batched() -> None:
            got["batched"] = propose_positions(model, tok, sample_t, sample_p, max_words=MAX_WORDS)

        def one_by_one() -> None:
            got["single"] = [[complete(model, tok, t[:i], max_words=MAX_WORDS, temperature=0.0, rule=FIRST_WORD)
                              for i in where] for t, where in zip(sample_t, sample_p)]

        single_s, batched_s = time_pair(one_by_one, batched, repeats=3, warmup=0)
        stats: dict[str, int] = {}
        t0 = time.perf_counter()
        propose_positions(model, tok, texts, positions, max_words=MAX_WORDS, stats=stats)
        all_s = time.perf_counter() - t0
    finally:
        torch.set_num_threads(before)
    n_sample = sum(len(p) for p in sample_p)
    detail = {"model": label, "run": str(run), "threads": threads, "sample_emails": SAMPLE,
              "sample_proposals": n_sample, "single_s": single_s, "batched_s": batched_s,
              "differ": _differ(got["single"], got["batched"])}
    share = 100 * all_s / train_s
    print(f"  proposals: one by one {single_s:.2f} s, batched {batched_s:.2f} s on {n_sample} positions; "
          f"all {stats['proposals']} in {all_s:.1f} s = {share:.1f}% of {train_s / 60:.0f} training minutes",
          flush=True)
    return [row("evaluation", f"{label}: typing proposals batched / one by one", "proposals at every typed letter "
                f"of {SAMPLE} test emails: complete() at each position over propose_positions (prefix trunk + "
                f"lanes), timed in turn; differing proposals in detail", single_s / batched_s, "x", **detail),
            row("evaluation", f"{label}: every-letter typing / training time", f"propose_positions over every "
                f"typed letter of the {len(texts)} emails seqlab eval types ({WORDS} words each), as a share of "
                "the run's training minutes", share, "%", f"<= {GOAL_SHARE:g}", seconds=all_s, train_s=train_s,
                **stats, model=label, threads=threads)]
