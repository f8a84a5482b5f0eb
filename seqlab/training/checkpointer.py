"""When the training loop saves, what a save holds, and how a resume puts it back.

`Checkpointer` is handed the run's stateful parts once (`seqlab.training.train_state`) and from then on
knows how to save them all and load them all: the loop only says when (`maybe_save(step)`), and this is the
other half of exact resume. The weights go to the checkpoint's model file (averaged, when train.ema is on;
the raw ones then travel as the "ema" part), the rest to `trainer_state.pt` (`seqlab.runs.checkpoint`).
Weights holding NaN or inf are never saved (`guards.StepGuard.weights_ok`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from seqlab.runs.checkpoint import LoadedCheckpoint, save_run_checkpoint
from seqlab.training import guards
from seqlab.training.distributed import World
from seqlab.training.ema import WeightAverage, averaged, resume_weights
from seqlab.training.train_state import Stateful, from_trainer_state, to_trainer_state

__all__ = ["Checkpointer"]


class Checkpointer:
    """Saves RUN_DIR's checkpoints (rank 0 writes; every rank takes part) and loads one back.

    `parts` are the shared parts by name ("optimizer", "progress", "best", "data"); `own` the parts every
    rank holds its own of ("rng", "stream_state"), gathered into the one file by `dist`."""

    def __init__(self, run_dir: Path, every: int, model: torch.nn.Module, ema: WeightAverage | None,
                 parts: dict[str, Stateful], own: dict[str, Stateful], *, dist: World, guard: guards.StepGuard,
                 config_json: str, tokenizer_json: str) -> None:
        self.run_dir, self.every, self.model, self.ema = run_dir, every, model, ema
        self.parts, self.own, self.dist, self.guard = parts, own, dist, guard
        self.config_json, self.tokenizer_json = config_json, tokenizer_json
        self.last_step = -1  # the newest step saved by this session

    def should_save(self, step: int, *, best: bool = False, final: bool = False) -> bool:
        """Every train.ckpt_every steps, at a new best and at the run's end; never once the run halted."""
        return not self.guard.halt and (best or final or step % self.every == 0)

    def maybe_save(self, step: int, *, best: bool = False, final: bool = False) -> None:
        if self.should_save(step, best=best, final=final):
            self.save(step, best=best)

    def save(self, step: int, best: bool = False) -> None:
        """Save step `step` (also as best/ with `best`), unless its weights are non-finite."""
        if not self.guard.weights_ok(self.model, step):
            return
        own = {name: part.state_dict() for name, part in self.own.items()}
        ranks = self.dist.gather_states(own)  # every rank's, on rank 0 (which alone writes)
        if ranks is not None:
            with averaged(self.ema) as raw:  # the model file holds the average; trainer_state the raw weights
                parts: dict[str, Any] = {name: part.state_dict() for name, part in self.parts.items()}
                parts["ema"] = None if raw is None or self.ema is None else self.ema.state(raw)
                state = to_trainer_state(parts, own, self.dist.state_fields(ranks))
                save_run_checkpoint(self.run_dir, self.model, state, self.config_json, self.tokenizer_json,
                                    is_best=best)
        self.last_step = self.guard.saved_step = step  # on every rank: they decide alike

    def load(self, ckpt: LoadedCheckpoint) -> None:
        """Put every part back as `ckpt` holds it: the weights (raw, under an average), the shared parts,
        and this rank's own (`UserError` when the run was saved by another number of processes)."""
        ckpt.load_into(self.model)
        saved = from_trainer_state(ckpt.trainer_state)
        resume_weights(self.model, saved["ema"], self.ema)  # the file held the average: raw weights back
        for name, part in self.parts.items():
            part.load_state_dict(saved[name])
        own = self.dist.own_state(ckpt.trainer_state, self.run_dir)  # all of trainer_state when alone
        for name in reversed(self.own):  # the RNG last, so nothing restored after it draws from it
            self.own[name].load_state_dict(own.get(name))
        self.guard.saved_step = saved["progress"].get("step", 0)  # the step resumed from
