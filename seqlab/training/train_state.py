"""The parts of a training run's state, each with `state_dict()` / `load_state_dict()`, and how their state
dicts lie in a checkpoint's `trainer_state.pt`.

A checkpoint is the dict of its parts' state dicts: the optimizer, the loop's counters (`Progress`), the
best validation (`BestTracker`), where the data stands (`DataPosition`), the raw weights under a weight
average (`ema`), and per rank the RNG states (`RngState`) and the carried stream state (`StreamCarry`). The
weights themselves go to the checkpoint's model file (`seqlab.runs.checkpoint`).

The layout on disk is older than the parts and is kept, so every saved run still resumes:
`to_trainer_state` lays the parts out as the file holds them, `from_trainer_state` reads them back.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from seqlab.models.lm import LMState, map_tensors
from seqlab.runs.checkpoint import capture_rng_state, restore_rng_state
from seqlab.training.progress import Progress

__all__ = ["DataPosition", "RngState", "Stateful", "StreamCarry", "from_trainer_state", "to_trainer_state"]

# the parts laid out in trainer_state.pt; the best validation shares the "progress" entry with the counters
BEST_FIELDS = ("best_val", "best_step", "evals_since_best")


class Stateful(Protocol):
    """A part of the training state a checkpoint keeps."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class RngState:
    """Every RNG the loop draws from (torch, CUDA, numpy, python): this rank's dropout and sampling."""

    def state_dict(self) -> dict[str, Any]:
        return capture_rng_state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        restore_rng_state(state)


class StreamCarry:
    """The hidden state a recurrent model carries from one chunk of its email stream to the next
    (truncated BPTT); None for window training and before the first step."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.state: LMState | None = None

    def state_dict(self) -> dict[str, Any] | None:  # type: ignore[override]
        """As plain containers of tensors on the CPU (loadable with weights_only=True); None when empty."""
        if self.state is None:
            return None
        st = self.state
        return map_tensors({"layers": st.layers, "cross": st.cross, "pos": st.pos}, lambda x: x.detach().cpu())

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state is not None:
            self.state = LMState(**map_tensors(state, lambda x: x.to(self.device)))


class DataPosition:
    """Where the data stands: the batch of step s is a pure function of (seed, s), so the step and the
    seed are the whole position and nothing needs restoring beyond the step (`Progress`)."""

    def __init__(self, mode: str, seed: int, progress: Progress) -> None:
        self.mode, self.seed, self.progress = mode, seed, progress

    def state_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "step": self.progress.step, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore: the step comes back with `Progress`."""


def to_trainer_state(parts: dict[str, Any], own: dict[str, Any], world: dict[str, Any]) -> dict[str, Any]:
    """trainer_state.pt from the parts' state dicts ("optimizer", "progress", "best", "data", and "ema" when
    there is an average), this rank's `own` ("rng", "stream_state") and the world's fields (its size and,
    under torchrun, every rank's own state; `World.state_fields`)."""
    counters = dict(parts["progress"])
    state = {
        "step": counters["step"],
        "optimizer": parts["optimizer"],
        "progress": {"step": counters.pop("step"), **parts["best"], **counters},
        **own,
        "data_position": parts["data"],
        **world,
    }
    if parts.get("ema") is not None:
        state["ema"] = parts["ema"]
    return state


def from_trainer_state(state: dict[str, Any]) -> dict[str, Any]:
    """The parts' state dicts in trainer_state.pt (the inverse of `to_trainer_state`, less the ranks' own
    states, which `World.own_state` picks out)."""
    saved = state["progress"]
    return {"optimizer": state["optimizer"],
            "progress": {k: v for k, v in saved.items() if k not in BEST_FIELDS},
            "best": {k: v for k, v in saved.items() if k in BEST_FIELDS},
            "data": state.get("data_position", {}), "ema": state.get("ema")}
