"""Counters and stop signals of the training loop: `Progress` (saved with every checkpoint) and `StopFlag`."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any


@dataclass
class Progress:
    """What the loop needs to continue: saved in trainer_state.pt as primitives."""

    step: int = 0
    best_val: float = float("inf")
    best_step: int = -1
    evals_since_best: int = 0
    elapsed: float = 0.0  # seconds of training, summed over resumes
    tokens: int = 0  # input tokens (not padding) seen
    bad_in_a_row: int = 0  # consecutive steps not applied (non-finite loss or gradient; training/guards.py)
    skipped_steps: int = 0  # all such steps of the run

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
