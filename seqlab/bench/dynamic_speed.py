"""`seqlab eval --dynamic` against the recipe's training minutes (an "evaluation" row; goal <= 100%).

The whole command as the CLI runs it (what `Run.evaluate(dynamic=True)` calls, on the test split, every default): the
frozen evaluation with its saved characters, then the frozen and the dynamic pass over every test email in
date order per sender, each scoring the email, making its proposals and (the dynamic one) taking a step on it.
Timed once, at `threads` torch threads, on the model `proposal_speed` uses (the 10-minute recipe run when it
exists, else the latency benchmark's GRU with its 2 training minutes).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from seqlab.bench.harness import row
from seqlab.bench.proposal_speed import model_source
from seqlab.options import EvalOptions

GOAL_SHARE = 100.0  # % of the training minutes


def rows(cache: Path, threads: int) -> list[dict[str, Any]]:
    """The row of the module docstring."""
    from seqlab.evaluation.dynamic import dynamic_eval
    from seqlab.evaluation.report import evaluate_run

    run, data, train_s, label = model_source(cache)
    options = EvalOptions(split="test", data=str(data), dynamic=True)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        t0 = time.perf_counter()  # what `Run.evaluate` runs for the CLI
        evaluate_run(run, options, "cpu")
        dyn = dynamic_eval(run, options, "cpu")
        seconds = time.perf_counter() - t0
    finally:
        torch.set_num_threads(before)
    share = 100 * seconds / train_s
    print(f"  eval --dynamic: {seconds:.0f} s = {share:.0f}% of {train_s / 60:.0f} training minutes "
          f"({dyn['emails']} test emails)", flush=True)
    return [row("evaluation", f"{label}: eval --dynamic / training time", "seqlab eval --split test --dynamic "
                "(the frozen evaluation, then the frozen and the dynamic pass over every test email), as a share "
                "of the run's training minutes", share, "%", f"<= {GOAL_SHARE:g}", seconds=seconds,
                train_s=train_s, emails=dyn["emails"], bpb_frozen=dyn["frozen"]["bpb"],
                bpb_dynamic=dyn["dynamic"]["bpb"], model=label, threads=threads)]
