"""The pieces of training that need no trainer state: schedule, optimizer groups, loss, signals, progress.

Kept apart from `train.py` (the loop and its checkpoints) so each file stays short.
"""

from __future__ import annotations

import math
import signal
from dataclasses import dataclass
from typing import Any

import torch


def lr_at(step: int, lr: float, warmup: int, max_steps: int, min_ratio: float, time_frac: float = 0.0) -> float:
    """Linear warmup over `warmup` steps, then cosine decay from lr to lr * min_ratio at max_steps.

    `time_frac` (elapsed / wall-clock budget, when there is one) moves the decay along with time, so a
    run stopped by train.max_minutes still ends at the low learning rate: whichever budget runs out first
    sets the pace. (A time-paced schedule is not bitwise repeatable; step-paced runs are.)"""
    if warmup and step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, max((step - warmup) / max(1, max_steps - warmup), time_frac))
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float, betas: tuple[float, float],
                   device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on biases, norms' gains or other vectors)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=device.type == "cuda")


@dataclass
class Progress:
    """What the loop needs to continue: saved in trainer_state.pt as primitives."""

    step: int = 0
    best_val: float = float("inf")
    best_step: int = -1
    evals_since_best: int = 0
    elapsed: float = 0.0  # seconds of training, summed over resumes
    tokens: int = 0  # input tokens (not padding) seen

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class StopFlag:
    """SIGINT/SIGTERM set the flag; the loop finishes the current step, saves, and exits cleanly."""

    def __init__(self) -> None:
        self.raised: str | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> StopFlag:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: signals cannot be caught here
                pass
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.raised = signal.Signals(signum).name

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
