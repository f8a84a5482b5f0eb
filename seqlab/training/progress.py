"""Counters, stop signals and the bar of the training loop: `Progress` (saved with every checkpoint),
`StopFlag`, `ProgressBar`, and `StepReport`, what a caller's `on_step` callback is handed after each step."""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from tqdm import tqdm


class FieldState:
    """`state_dict` / `load_state_dict` of a dataclass of plain values: its fields, by name."""

    def state_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take the fields in `state`; one a checkpoint lacks keeps its starting value."""
        for f in fields(self):  # type: ignore[arg-type]
            if f.name in state:
                setattr(self, f.name, state[f.name])


@dataclass
class Progress(FieldState):
    """The loop's counters, one part of a checkpoint (`state_dict` / `load_state_dict`)."""

    step: int = 0
    elapsed: float = 0.0  # seconds of training, summed over resumes
    tokens: int = 0  # input tokens (not padding) seen
    bad_in_a_row: int = 0  # consecutive steps not applied (non-finite loss or gradient; training/guards.py)
    skipped_steps: int = 0  # all such steps of the run


@dataclass(frozen=True)
class StepReport:
    """What `train(..., on_step=f)` hands `f` after every optimizer step (`seqlab.train`'s progress callback).

    `loss` is the step's mean training loss in nats per token (NaN for a step that was skipped as
    non-finite); `val_loss` and `val_bpb` are set on the steps that ran validation, else None.
    """

    step: int  # steps done so far, resumed ones included
    max_steps: int
    loss: float
    elapsed_s: float  # seconds of training so far, summed over resumes
    tokens: int  # input tokens (not padding) seen so far
    val_loss: float | None = None
    val_bpb: float | None = None


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


class ProgressBar:
    """The terminal bar of one training session. With a wall-clock budget it counts seconds (an honest
    ETA), otherwise steps; its postfix gives tokens/s averaged over this session and MFU."""

    def __init__(self, progress: Progress, max_steps: int, max_minutes: float, show: bool) -> None:
        self.timed = bool(max_minutes)
        if self.timed:
            self.total, done, unit = round(max_minutes * 60), round(progress.elapsed), "s"
        else:
            self.total, done, unit = max_steps, progress.step, " step"
        self.bar = tqdm(total=self.total, initial=done, desc="training", unit=unit, disable=not show)
        self.start_step = progress.step
        self.tokens, self.seconds = 0, 0.0  # this session's, for the rate

    def update(self, progress: Progress, tokens: int, dt: float, loss: float, fed_per_step: int,
               mfu: Callable[[float], float]) -> None:
        """After one step that read `tokens` (padding excluded) in `dt` seconds; `fed_per_step` counts
        padding as the model computes it, which is what `mfu` (tokens/s -> fraction of peak) takes."""
        self.tokens, self.seconds = self.tokens + tokens, self.seconds + dt
        self.bar.update(min(round(progress.elapsed), self.total) - self.bar.n if self.timed else 1)
        rate = self.tokens / max(self.seconds, 1e-9)
        fed = fed_per_step * (progress.step - self.start_step) / max(self.seconds, 1e-9)
        self.bar.set_postfix(step=progress.step, loss=f"{loss:.3f}", tok_s=f"{rate:.0f}", mfu=f"{mfu(fed):.0%}")

    def close(self) -> None:
        self.bar.close()
