"""What keeps a training run from spoiling its work: the non-finite checks.

- `StepGuard` and `grad_norm`: a step whose loss or gradient norm is NaN or infinite is not
  applied, and weights holding NaN or inf are never saved.
- `finite_or_none`: metrics.jsonl stays JSON (`NaN` and `Infinity` are not JSON), a non-finite value is null.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import torch
from tqdm import tqdm

from seqlab.training.progress import Progress

NONFINITE_LOSS = "non-finite loss"
NONFINITE_GRAD = "non-finite gradient norm"


def say(message: str) -> None:
    """One plain line on stderr that does not tear the progress bar (tqdm.write moves the bar below it)."""
    tqdm.write(f"seqlab: warning: {message}", file=sys.stderr)


class StepGuard:
    """The bad-step bookkeeping of one run: skipped steps are counted in `Progress` (saved with every
    checkpoint, so a resume mid-streak counts on exactly), said on stderr, logged, and after
    `max_in_a_row` of them in a row the run halts; weights are checked before every save."""

    def __init__(self, max_in_a_row: int) -> None:
        self.max_in_a_row = max_in_a_row
        self.halt: str | None = None  # why the run cannot go on, once it cannot
        self.saved_step: int | None = None  # the newest checkpoint of the run (resumed from or saved)

    def _kept(self) -> str:
        """What is left to go on from, and how: the end of a halt's one sentence."""
        if self.saved_step is None:
            return "no checkpoint was saved; start again with a lower train.lr"
        return f"the last good checkpoint is step {self.saved_step}; resume from it with a lower train.lr"

    def bad_step(self, progress: Progress, reason: str) -> dict[str, Any]:
        """Count a step that was not applied (`progress.step` is the steps done, this one included);
        return its metrics.jsonl record."""
        progress.bad_in_a_row += 1
        progress.skipped_steps += 1
        n = progress.bad_in_a_row
        say(f"step {progress.step} skipped: {reason} ({n} in a row; the run stops at {self.max_in_a_row})")
        if n >= self.max_in_a_row:
            self.halt = (f"stopped at step {progress.step}: the loss or its gradient was non-finite at {n} steps "
                         f"in a row (train.max_bad_steps={self.max_in_a_row}); {self._kept()}")
        return {"step": progress.step, "skipped": reason, "bad_in_a_row": n, "elapsed": round(progress.elapsed, 2)}

    def weights_ok(self, model: torch.nn.Module, step: int) -> bool:
        """False (said, and the run halts) when a weight holds NaN or inf: such weights are never saved,
        neither as a step checkpoint nor as the best, and the checkpoints before them are kept."""
        bad = nonfinite_weights(model)
        if bad:
            say(f"not saving step {step}: non-finite weights in {', '.join(bad[:3])}{' ...' if bad[3:] else ''}")
            self.halt = f"stopped at step {step}: the weights became non-finite; {self._kept()}"
        return not bad


def grad_norm(model: torch.nn.Module, clip: float) -> float:
    """The global gradient norm, after clipping the gradients to `clip` when it is positive. Without
    clipping the norm is still measured (the gradients are left as they are), so that an infinite or NaN
    gradient is caught either way. Clipping an infinite norm scales by inf * 0 = NaN: never step on it."""
    if clip:
        return float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip))
    return float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None]))


def nonfinite_weights(model: torch.nn.Module) -> list[str]:
    """Names of the floating-point parameters and buffers holding a NaN or an infinity."""
    return [name for name, t in model.state_dict().items()
            if t.is_floating_point() and not bool(torch.isfinite(t).all())]


def finite_or_none(record: dict[str, Any]) -> dict[str, Any]:
    """`record` with every non-finite float replaced by None (null in JSON)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
