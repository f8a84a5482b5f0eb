"""A tiny training run in which the rows of the batch that rank 1 reads give NaN logits at one step.

Run alone (in-process, `train_with_bad_rows`) the NaN sits in the second half of the global batch; run
under torchrun with 2 processes (`python -m torch.distributed.run --nproc_per_node=2 tests/ddp_bad_step.py
DATA_DIR RUN_DIR STEP key=value ...`) it sits on rank 1 alone, whose loss alone is then non-finite. Either
way the step must be skipped (on every rank), and the two runs must end alike. Under torchrun, rank 0
also prints whether every rank ended with bitwise the same weights ("ranks agree").
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from seqlab.config import apply_overrides, get_preset
from seqlab.training.trainer import Trainer


def train_with_bad_rows(data: Path, run: Path, bad_step: int, overrides: list[str]) -> Trainer:
    """Train the tiny preset plus `overrides`; at step `bad_step` rank 1's rows of the batch give NaN logits."""
    trainer = Trainer(data, run, apply_overrides(get_preset("tiny"), overrides), progress=False)
    inner, world = trainer.step_model, trainer.dist

    def forward(x: torch.Tensor, **kw: Any) -> tuple[torch.Tensor, Any]:
        logits, state = inner(x, **kw)  # (B, T, V) with B the rows this process reads
        if trainer.progress.step == bad_step and (world.size == 1 or world.rank == 1):
            rows = slice(logits.shape[0] // 2, None) if world.size == 1 else slice(None)  # rank 1's rows
            logits = logits.clone()
            logits[rows] = float("nan")
        return logits, state

    trainer.step_model = forward
    trainer.run()
    return trainer


def _ranks_agree(trainer: Trainer) -> bool:
    """Whether every rank holds bitwise the weights rank 0 holds (no rank applied a step the others skipped)."""
    flat = torch.cat([p.detach().reshape(-1) for p in trainer.model.parameters()])
    copies = [torch.empty_like(flat) for _ in range(trainer.dist.size)]
    dist.all_gather(copies, flat)
    return all(torch.equal(c, copies[0]) for c in copies)


def main() -> None:
    """The trainer lives in this function, as in `seqlab train`, so it is freed before the interpreter
    finalizes: whatever still holds the gloo group then (DDP's reducer may, past destroy_process_group) would
    be torn down during finalization, which aborts a rank now and then (SIGABRT)."""
    data_dir, run_dir, step, *rest = sys.argv[1:]
    done = train_with_bad_rows(Path(data_dir), Path(run_dir), int(step), rest)
    agree = _ranks_agree(done)
    if done.dist.is_main:
        print("ranks agree" if agree else "ranks differ", flush=True)
    done.close()


if __name__ == "__main__":
    main()
