"""A tiny Trainer built in-process, as the tests that break training build it."""

from __future__ import annotations

from pathlib import Path

from seqlab.config import apply_overrides, get_preset
from seqlab.training.trainer import Trainer

BASE = ["train.threads=1", "train.log_every=1"]  # one thread: bitwise-repeatable runs; a metrics line per step


def tiny_trainer(data: Path, run: Path, *overrides: str, resume: bool = False) -> Trainer:
    """The tiny preset plus BASE and `overrides` (or, with `resume`, the run's own config plus them)."""
    if resume:
        return Trainer(data, run, resume=resume, overrides=list(overrides), progress=False)
    return Trainer(data, run, apply_overrides(get_preset("tiny"), [*BASE, *overrides]), progress=False)
