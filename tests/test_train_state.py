"""The training state's parts and the trainer_state.pt layout they are saved in (no training here: the
resume-equals-uninterrupted runs are in test_train.py and test_breaking_checkpoints.py)."""

from __future__ import annotations

import math

import torch

from seqlab.training.progress import Progress
from seqlab.training.train_state import DataPosition, RngState, StreamCarry, from_trainer_state, to_trainer_state
from seqlab.training.validation import BestTracker

# the layout every saved run has, which a resume of an old run reads
FILE_KEYS = ["step", "optimizer", "progress", "rng", "stream_state", "data_position", "world_size"]
PROGRESS_KEYS = ["step", "best_val", "best_step", "evals_since_best", "elapsed", "tokens", "bad_in_a_row",
                 "skipped_steps"]


def _parts(progress: Progress, best: BestTracker) -> dict:
    return {"optimizer": {"state": {}, "param_groups": []}, "progress": progress.state_dict(),
            "best": best.state_dict(), "data": DataPosition("window", 3, progress).state_dict()}


def test_the_parts_lie_in_trainer_state_as_the_file_always_held_them() -> None:
    progress, best = Progress(step=7, elapsed=1.5, tokens=99, bad_in_a_row=1, skipped_steps=2), BestTracker()
    best.update(4, 2.5)
    own = {"rng": RngState().state_dict(), "stream_state": StreamCarry(torch.device("cpu")).state_dict()}
    state = to_trainer_state(_parts(progress, best), own, {"world_size": 1})
    assert list(state) == FILE_KEYS and list(state["progress"]) == PROGRESS_KEYS
    assert state["step"] == 7 and state["data_position"] == {"mode": "window", "step": 7, "seed": 3}
    assert state["progress"]["best_val"] == 2.5 and state["progress"]["best_step"] == 4
    back = from_trainer_state(state)
    again_progress, again_best = Progress(), BestTracker()
    again_progress.load_state_dict(back["progress"])
    again_best.load_state_dict(back["best"])
    assert again_progress == progress and again_best == best and back["ema"] is None


def test_a_weight_average_adds_its_entry_last() -> None:
    parts = {**_parts(Progress(), BestTracker()), "ema": {"updates": 2, "raw": {}}}
    state = to_trainer_state(parts, {"rng": {}, "stream_state": None}, {"world_size": 1})
    assert list(state) == [*FILE_KEYS, "ema"] and from_trainer_state(state)["ema"] == {"updates": 2, "raw": {}}


def test_a_counter_the_checkpoint_lacks_keeps_its_starting_value() -> None:
    progress = Progress(step=5, skipped_steps=9)
    progress.load_state_dict({"step": 3, "best_val": 1.0, "elapsed": 2.0, "tokens": 10})
    assert progress == Progress(step=3, elapsed=2.0, tokens=10, skipped_steps=9)


def test_the_best_is_never_a_non_finite_loss_and_patience_counts_validations() -> None:
    best = BestTracker()
    assert best.update(2, 3.0) and not best.update(4, -math.inf) and not best.update(6, math.nan)
    assert (best.best_val, best.best_step, best.evals_since_best) == (3.0, 2, 2)
    assert best.stalled(2) and not best.stalled(3) and not best.stalled(0)
    assert best.update(8, 2.0) and best.evals_since_best == 0
