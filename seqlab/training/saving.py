"""How the training loop's state goes into a checkpoint and comes back: the weights (averaged when
train.ema is on), the optimizer, the counters, each rank's RNG states and carried stream state, and where
the data stands (`trainer_state.pt`, written by `seqlab.runs.checkpoint`).

`SavesState` is a base of `seqlab.training.trainer.Trainer`, kept apart because it holds the other half
of exact resume: the loop decides when to save, this decides what a save holds. It reads the trainer's
model, opt, ema, progress, stream_state, guard, dist, log, cfg, tok, mode and run_dir.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch

from seqlab.config import RunConfig
from seqlab.data.tokenizer import Tokenizer
from seqlab.models.lm import LMState, map_tensors
from seqlab.runs.checkpoint import LoadedCheckpoint, capture_rng_state, restore_rng_state, save_run_checkpoint
from seqlab.training import guards
from seqlab.training.distributed import World
from seqlab.training.ema import WeightAverage, resume_weights
from seqlab.training.progress import Progress
from seqlab.training.run_log import RunLog

__all__ = ["SavesState"]


class SavesState:
    """Resume from a checkpoint and save one, for the trainer that derives from it."""

    model: torch.nn.Module
    opt: torch.optim.Optimizer
    ema: WeightAverage | None
    progress: Progress
    stream_state: Any
    guard: guards.StepGuard
    dist: World
    log: RunLog
    cfg: RunConfig
    tok: Tokenizer
    announce: bool  # print where a resumed run continues
    resumed_at: int | None
    mode: str
    run_dir: Path
    device: torch.device
    last_save_step: int

    def _resume(self, ckpt: LoadedCheckpoint) -> None:
        ckpt.load_into(self.model)
        ts = ckpt.trainer_state
        resume_weights(self.model, ts.get("ema"), self.ema)  # the file held the average: raw weights back
        self.opt.load_state_dict(ts["optimizer"])
        self.progress = Progress(**ts["progress"])
        own = self.dist.own_state(ts, self.run_dir)  # this rank's RNG and stream state (all of ts when alone)
        saved_state = own.get("stream_state")
        if saved_state is not None:
            self.stream_state = LMState(**map_tensors(saved_state, lambda x: x.to(self.device)))
        restore_rng_state(own["rng"])
        self.guard.saved_step = self.progress.step
        if self.dist.is_main:
            self.log.truncate(self.progress.step)
            self.resumed_at = self.progress.step  # in the summary, for a caller that does not print
            if self.announce:
                print(f"resumed {self.run_dir} at step {self.progress.step}")

    def _averaged(self) -> contextlib.AbstractContextManager[dict[str, torch.Tensor] | None]:
        """The model holds the weight average inside the block (training/ema.py), when train.ema is on."""
        return self.ema.applied() if self.ema is not None else contextlib.nullcontext()

    def _save(self, best: bool = False) -> None:
        if not self.guard.weights_ok(self.model, self.progress.step):
            return
        own = {"rng": capture_rng_state(), "stream_state": self._stream_state_dict()}
        ranks = self.dist.gather_states(own)  # every rank's, on rank 0 (which alone writes)
        if ranks is not None:
            with self._averaged() as raw:  # the file holds the average; trainer_state the raw weights
                ema_state = None if raw is None or self.ema is None else self.ema.state(raw)
                self._write_checkpoint(best, ranks, own, ema_state)
        self.last_save_step = self.guard.saved_step = self.progress.step  # on every rank: they decide alike

    def _write_checkpoint(self, best: bool, ranks: list[dict[str, Any]], own: dict[str, Any],
                          ema_state: dict[str, Any] | None) -> None:
        trainer_state = {
            "step": self.progress.step,
            "optimizer": self.opt.state_dict(),
            "progress": self.progress.to_dict(),
            **own,
            "data_position": {"mode": self.mode, "step": self.progress.step, "seed": self.cfg.train.seed},
            **self.dist.state_fields(ranks),
        }
        if ema_state is not None:
            trainer_state["ema"] = ema_state
        save_run_checkpoint(self.run_dir, self.model, trainer_state, self.cfg.to_json(), self.tok.to_json(),
                            is_best=best)

    def _stream_state_dict(self) -> dict[str, Any] | None:
        """The carried hidden state as plain containers of tensors (loadable with weights_only=True)."""
        if self.stream_state is None:
            return None
        st = self.stream_state
        return map_tensors({"layers": st.layers, "cross": st.cross, "pos": st.pos}, lambda x: x.detach().cpu())
