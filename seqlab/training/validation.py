"""When the training loop validates, how it scores, and which validation was the best so far.

- `Validator`: `should_validate(step)` every train.eval_every steps and at train.max_steps; `validate()`
  scores the weights (averaged, when train.ema is on) on a fixed sample of whole validation emails, the same
  every time, as `seqlab eval` scores a split (`heldout.score_split`): a recurrent model carries its state
  through each email, never starting fresh in the middle of one.
- `BestTracker`: the lowest validation loss and its step, and how many validations since it improved (what
  train.early_stop counts). A checkpoint part (`state_dict` / `load_state_dict`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from seqlab.config import RunConfig
from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import Tokenizer
from seqlab.evaluation.heldout import score_split
from seqlab.evaluation.plans import sample_emails
from seqlab.training.distributed import World
from seqlab.training.ema import WeightAverage, averaged
from seqlab.training.progress import FieldState

__all__ = ["BestTracker", "Validator"]


class Validator:
    """Validation of one run's model on `store` (the val split, or train when val is empty)."""

    def __init__(self, model: torch.nn.Module, store: TokenStore, cfg: RunConfig, tok: Tokenizer,
                 device: torch.device, dist: World, ema: WeightAverage | None) -> None:
        t = cfg.train
        self.model, self.store, self.tok, self.device, self.dist, self.ema = model, store, tok, device, dist, ema
        self.block_size, self.batch_size = cfg.model.block_size, t.batch_size
        self.every, self.max_steps = t.eval_every, t.max_steps
        # whole emails holding about eval_batches x batch_size x block_size targets, the same every time
        self.emails = sample_emails(store, t.eval_batches * t.batch_size * cfg.model.block_size, t.seed)
        self.autocast: Callable[[], Any] | None = None  # the forward pass's autocast, set once precision is known
        self.last_step, self.last = -1, {}  # the newest validation: its step and its numbers

    def should_validate(self, step: int) -> bool:
        return step % self.every == 0 or step == self.max_steps

    def validate(self) -> dict[str, float]:
        """Loss per target token (nats), bits per byte and perplexity on the fixed validation emails."""
        emails = np.asarray(list(self.dist.my_share(self.emails)), dtype=np.int64)  # this rank's share
        with averaged(self.ema):
            r = self.dist.heldout(score_split(self.model, self.store, self.block_size, self.batch_size, self.device,
                                              self.tok, emails=emails, autocast=self.autocast))
        return {"val_loss": r.loss, "val_bpb": r.bpb, "val_ppl": r.ppl}

    def keep(self, step: int, result: dict[str, float]) -> None:
        """Remember the validation of `step` (for the step report, and so the run's end does not repeat it)."""
        self.last_step, self.last = step, result

    def result_at(self, step: int) -> dict[str, float] | None:
        """The numbers of the validation at `step`, or None when that step did not validate."""
        return self.last if self.last_step == step else None


@dataclass
class BestTracker(FieldState):
    """The best validation so far; saved in trainer_state.pt beside the loop's counters."""

    best_val: float = float("inf")
    best_step: int = -1
    evals_since_best: int = 0

    def update(self, step: int, val_loss: float) -> bool:
        """Count one validation; True when it is the new best. A NaN or infinite loss is never the best."""
        if math.isfinite(val_loss) and val_loss < self.best_val:
            self.best_val, self.best_step, self.evals_since_best = val_loss, step, 0
            return True
        self.evals_since_best += 1
        return False

    def stalled(self, patience: int) -> bool:
        """True once `patience` validations in a row did not improve (never with patience 0)."""
        return bool(patience) and self.evals_since_best >= patience
