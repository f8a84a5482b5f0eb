"""An exponential moving average of the weights (`train.ema`), used for validation and saved as the run's weights.

    shadow <- d * shadow + (1 - d) * theta     after every applied optimizer step,
    d = min(train.ema, (1 + n) / (10 + n))      n = updates so far

The averaged weights sit nearer the bottom of the valley the noisy steps bounce around in (Polyak &
Juditsky 1992); the warm-up of d (the `num_updates` form of TensorFlow's ExponentialMovingAverage) keeps
a short run's average from being dominated by the random initial weights.

What is saved where: a checkpoint's `model.safetensors` holds the AVERAGED weights (what `load_run`,
`eval` and the server read); the raw weights the optimizer works on travel in `trainer_state.pt` under
"ema" (with the update count), so `--resume` continues the very same raw trajectory and average.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn


class WeightAverage:
    """The shadow copy of every parameter of `model` (tied parameters once), updated by `update()`."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"the weight average's decay must be in (0, 1), not {decay}")
        self.decay, self.updates = decay, 0
        named = list(model.named_parameters())  # a tied matrix appears once
        self.names, self.params = [n for n, _ in named], [p for _, p in named]
        self.shadow = [p.detach().clone() for p in self.params]

    def update(self) -> None:
        """Move the average towards the current weights (call after each applied optimizer step)."""
        self.updates += 1
        d = min(self.decay, (1 + self.updates) / (10 + self.updates))
        with torch.no_grad():
            torch._foreach_lerp_(self.shadow, [p.detach() for p in self.params], 1.0 - d)

    @contextlib.contextmanager
    def applied(self) -> Iterator[dict[str, torch.Tensor]]:
        """Inside the block the model holds the averaged weights; yields the raw ones (copies), which
        are put back on exit."""
        with torch.no_grad():
            raw = [p.detach().clone() for p in self.params]
            for p, s in zip(self.params, self.shadow):
                p.copy_(s)
        try:
            yield dict(zip(self.names, raw))
        finally:
            with torch.no_grad():
                for p, r in zip(self.params, raw):
                    p.copy_(r)

    def state(self, raw: dict[str, torch.Tensor]) -> dict[str, Any]:
        """What trainer_state.pt keeps: the raw weights (the model file holds the average) and the count."""
        return {"updates": self.updates, "raw": {name: t.detach().cpu() for name, t in raw.items()}}

    def restart_from(self, model: nn.Module, updates: int) -> None:
        """Take the model's current weights as the average (after loading an averaged checkpoint)."""
        self.shadow = [p.detach().clone() for p in self.params]
        self.updates = updates


def resume_weights(model: nn.Module, saved: dict[str, Any] | None, average: WeightAverage | None) -> None:
    """After a checkpoint's model file was loaded into `model`: make `average` (if any) continue from
    those averaged weights, and put the raw weights saved in trainer_state back into the model.

    Without a saved average (it was off) the model file held the raw weights already; with one but the
    average now off, the raw weights are still restored, so training continues where it was."""
    if average is not None:
        average.restart_from(model, int(saved["updates"]) if saved else 0)
    if saved:
        params = dict(model.named_parameters())
        missing = set(params) - set(saved["raw"])
        if missing:
            raise ValueError(f"the saved raw weights lack {', '.join(sorted(missing))}")
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(saved["raw"][name].to(p.device))


def averaged(average: WeightAverage | None) -> contextlib.AbstractContextManager[dict[str, torch.Tensor] | None]:
    """Inside the block the model holds the weight average when there is one (`WeightAverage.applied`,
    which yields the raw weights); without one, the model as it is (and None)."""
    return average.applied() if average is not None else contextlib.nullcontext()
