"""Data-parallel training under torchrun: the process group, who does what, and what the ranks agree on.

`torchrun --nproc_per_node=N -m seqlab train ...` starts N copies of the one trainer with RANK, LOCAL_RANK
and WORLD_SIZE in their environment; `World.from_env` joins them into a process group (`env://`): gloo for
tensors on the CPU and, where CUDA exists, NCCL for tensors on the GPU (`"cpu:gloo,cuda:nccl"`, one group),
each rank on `cuda:LOCAL_RANK`. Without torchrun (no WORLD_SIZE, or 1) `World()` is one process alone and
every method below is the identity or a no-op: no process group, no extra work, the same run as before.

What data parallelism changes, and where it is kept equal to one process with the same global batch:

- Batches: `train.batch_size` is the GLOBAL batch. Each rank reads a contiguous block of B / N rows of it
  (`shard`: windows for attention, whole lanes of the email stream for the recurrent models, so a lane's
  carried hidden state never crosses ranks; `seqlab.data.batches.shard_rows`).
- Loss: one process averages the cross-entropy over the scored targets of the whole micro-batch. A rank
  holds a part of them, so it divides its SUM by the global count (one all-reduce of an integer) and
  multiplies by N, which DDP's gradient averaging divides back out: the gradient is the single process's
  (up to the order of float32 sums). A plain per-rank mean would weight a rank's few targets like many.
- Accumulation: DDP all-reduces gradients in the backward pass; `micro_step` wraps every micro-step but
  the last in `no_sync()`, so a step of K micro-batches costs one all-reduce of the gradients, not K.
- Agreement: every decision that could send ranks down different paths is all-reduced, so no rank waits in
  a collective the others never reach: a skipped step (`agree_step`: any rank's non-finite loss or the
  non-finite gradient norm skips it on all), the stop (`agree_stop`: a signal to any rank, the wall-clock
  budget measured as the slowest rank's, which also keeps the time-based learning rate equal), validation
  (`heldout`: the fixed windows shared out, the sums all-reduced, so every rank sees the single-process
  figure and decides early stopping and the best checkpoint alike).
- Files: rank 0 alone writes RUN_DIR (lock, metrics, checkpoints, run.json, the progress bar). A checkpoint
  holds every rank's RNG states and carried stream state (`gather_states`, under `trainer_state["ranks"]`,
  with `"world_size"`), so the same checkpoint resumes every rank exactly; rank 0 reads it and hands it to
  the others (`share_checkpoint`), so other machines need not see RUN_DIR. A run resumes on as many
  processes as it was started on (`own_state`).

Bytes between ranks travel as `torch.save` blobs of tensors and primitives, read back with
`weights_only=True` (`seqlab.runs.checkpoint_files.trainer_state_from_bytes`): nothing is unpickled here either.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from seqlab.data.batches import IGNORE_INDEX
from seqlab.errors import UserError
from seqlab.evaluation.heldout import HeldOut, lm_loss
from seqlab.runs.checkpoint import LoadedCheckpoint
from seqlab.runs.checkpoint_files import trainer_state_from_bytes, trainer_state_to_bytes
from seqlab.training.guards import NONFINITE_GRAD, NONFINITE_LOSS
from seqlab.training.progress import Progress, StopFlag

__all__ = ["NoLock", "World", "launched_rank", "launched_world_size"]

T = TypeVar("T")


def launched_rank() -> int:
    """The rank torchrun gave this process (0 without torchrun): who prints the closing line."""
    return int(os.environ.get("RANK", "0") or 0)


def launched_world_size() -> int:
    """How many processes torchrun launched together (1 without torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


class NoLock:
    """What ranks other than 0 hold instead of the RUN_DIR lock: they never write RUN_DIR."""

    def acquire(self) -> None:
        """Nothing to take."""

    def release(self) -> None:
        """Nothing to drop."""

    def discard(self) -> None:
        """Nothing to drop or remove."""


@dataclass(frozen=True)
class World:
    """This process's place in a data-parallel run; `World()` is one process alone."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> World:
        """Join the process group torchrun's environment describes; one process alone without it."""
        size = int(os.environ.get("WORLD_SIZE", "1") or 1)
        if size <= 1:
            return cls()
        local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
        if not dist.is_initialized():
            cuda = torch.cuda.is_available()
            if cuda and local_rank < torch.cuda.device_count():
                torch.cuda.set_device(local_rank)  # NCCL's communicator is bound to this rank's GPU
            dist.init_process_group(backend="cpu:gloo,cuda:nccl" if cuda else "gloo", init_method="env://")
        return cls(dist.get_rank(), dist.get_world_size(), local_rank)

    @property
    def active(self) -> bool:
        """True when several processes train together."""
        return self.size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that writes RUN_DIR, logs and shows the progress bar."""
        return self.rank == 0

    def close(self) -> None:
        """Leave the process group together (rank 0 may still be writing the run's last files), once nothing
        else holds it: a gloo group that outlives this call is torn down while the interpreter finalizes, and
        its threads then abort the process now and then (SIGABRT). The trainer drops its DDP wrapper first."""
        if self.active and dist.is_initialized():
            dist.all_reduce(torch.zeros(1))  # a barrier over gloo (CPU), whatever GPUs the ranks have
            gc.collect()  # the dropped DDP wrapper and its reducer sit in reference cycles
            dist.destroy_process_group()

    # ------------------------------------------------------------ set-up

    def device(self, device: torch.device) -> torch.device:
        """The device this rank trains on: `cuda:LOCAL_RANK` for CUDA, else the one resolved."""
        if not self.active:
            return device
        if device.type == "cuda":
            gpus = torch.cuda.device_count()
            if self.local_rank >= gpus:
                raise UserError(f"{self.local_rank + 1} or more processes on this machine but {gpus} GPU(s): start "
                                "one process per GPU (torchrun --nproc_per_node) or train on the CPU")
            return torch.device("cuda", self.local_rank)
        if device.type != "cpu":  # gloo moves CPU tensors, NCCL CUDA ones; nothing carries MPS tensors
            raise UserError(f"train.device={device.type} cannot train with several processes; use cpu or cuda")
        return device

    def shard(self, batch_size: int) -> tuple[int, int]:
        """(rank, world) for the samplers; `UserError` unless the global batch divides by the world."""
        if batch_size % self.size:
            raise UserError(f"train.batch_size={batch_size} is the global batch and must divide by the "
                            f"{self.size} processes; use a multiple of {self.size}")
        return self.rank, self.size

    def seed_rank(self, seed: int) -> None:
        """Give ranks other than 0 their own torch RNG stream (dropout masks), after the model is built
        from the common seed; rank 0 keeps the stream a single process has."""
        if self.rank:
            torch.manual_seed(int(np.random.SeedSequence([seed, self.rank]).generate_state(1)[0]))

    def wrap(self, model: nn.Module) -> nn.Module:
        """DistributedDataParallel around `model` (which it broadcasts from rank 0); `model` when alone."""
        if not self.active:
            return model
        param = next(model.parameters())
        ids = [param.device.index] if param.device.type == "cuda" else None
        # Buffers are constants (positions, masks) computed alike on every rank: synced once, not per forward.
        return nn.parallel.DistributedDataParallel(model, device_ids=ids, forward_sync_buffers=False)

    # ------------------------------------------------------------ one step

    def micro_step(self, ddp_model: nn.Module, last: bool) -> contextlib.AbstractContextManager[Any]:
        """Around one micro-step's forward and backward: gradients are all-reduced on the last only."""
        if not self.active or last:
            return contextlib.nullcontext()
        return ddp_model.no_sync()  # type: ignore[operator]

    def lm_loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The training loss of this rank's rows, scaled so that DDP's averaged gradient is the gradient
        of the whole micro-batch's mean loss: sum / n_global * world (module doc). Alone: `lm_loss`."""
        if not self.active:
            return lm_loss(logits, y)
        n = torch.tensor([int((y != IGNORE_INDEX).sum())], dtype=torch.float64)  # scored targets here
        dist.all_reduce(n)  # ... and on every rank
        scale = self.size / float(n) if float(n) else math.nan  # no target anywhere: NaN, as one process's mean
        return lm_loss(logits, y, reduction="sum") * scale

    def agree_step(self, total: float, tokens: int, skipped: str | None) -> tuple[float, int, str | None]:
        """All-reduce one step's outcome: (the whole batch's summed micro-batch losses, input tokens of all
        ranks, why the step is skipped if ANY rank found a non-finite loss or gradient norm)."""
        if not self.active:
            return total, tokens, skipped
        v = torch.tensor([total, tokens, skipped == NONFINITE_LOSS, skipped == NONFINITE_GRAD], dtype=torch.float64)
        dist.all_reduce(v)
        reason = NONFINITE_LOSS if v[2] else NONFINITE_GRAD if v[3] else None
        # a rank's loss is its share times world (`lm_loss`): the sum over ranks is world times the mean
        return float(v[0]) / self.size, int(v[1]), reason

    def agree_stop(self, progress: Progress, flag: StopFlag) -> None:
        """Before each step: the slowest rank's elapsed time becomes everyone's (budget and time-based
        schedule alike), and a signal to any rank stops them all."""
        if not self.active:
            return
        v = torch.tensor([progress.elapsed, flag.raised is not None], dtype=torch.float64)
        dist.all_reduce(v, op=dist.ReduceOp.MAX)
        progress.elapsed = float(v[0])
        if v[1] and flag.raised is None:
            flag.raised = "a signal to another process"

    # ------------------------------------------------------------ validation

    def my_share(self, items: Sequence[T]) -> Iterator[T]:
        """Every world-th item from this rank's: the ranks' shares together are `items`, each once."""
        return iter(items[self.rank::self.size])

    def heldout(self, part: HeldOut) -> HeldOut:
        """The sums of the whole held-out set from each rank's part of it (float64; token and byte counts
        stay exact): the single-process figure up to the order of the float64 additions."""
        if not self.active:
            return part
        v = torch.tensor([part.nll_nats, part.tokens, part.bytes], dtype=torch.float64)
        dist.all_reduce(v)
        return HeldOut(float(v[0]), int(v[1]), int(v[2]))

    # ------------------------------------------------------------ checkpoints

    def gather_states(self, own: dict[str, Any]) -> list[dict[str, Any]] | None:
        """Every rank's `own` state (RNG, carried stream state) in rank order, on rank 0; None elsewhere."""
        if not self.active:
            return [own]
        blobs = self._all_gather_bytes(trainer_state_to_bytes(own))
        if not self.is_main:
            return None
        return [trainer_state_from_bytes(b, f"rank {r}'s state") for r, b in enumerate(blobs)]

    def state_fields(self, ranks: list[dict[str, Any]]) -> dict[str, Any]:
        """What a checkpoint's trainer state records of the world: its size, and each rank's own state."""
        return {"world_size": self.size, **({"ranks": ranks} if self.active else {})}

    def own_state(self, trainer_state: dict[str, Any], run_dir: Path) -> dict[str, Any]:
        """This rank's RNG and stream state in a checkpoint's trainer state; `UserError` when the run was
        saved by a different number of processes (their RNG streams and lanes would not line up)."""
        saved = trainer_state.get("world_size", 1)
        if saved != self.size:
            raise UserError(f"{run_dir} was trained by {saved} process{'es' if saved != 1 else ''}; resume it on "
                            f"{saved} (torchrun's nodes times processes per node), not {self.size}")
        return trainer_state["ranks"][self.rank] if self.active else trainer_state

    def share_checkpoint(self, ckpt: LoadedCheckpoint | None) -> LoadedCheckpoint | None:
        """Rank 0's checkpoint (read and verified there) on every rank; `ckpt` when alone."""
        if not self.active:
            return ckpt
        blob = b""
        if self.is_main and ckpt is not None:
            blob = trainer_state_to_bytes({"path": str(ckpt.path), "step": ckpt.step, "weights": ckpt.weights,
                                           "trainer_state": ckpt.trainer_state, "config_json": ckpt.config_json,
                                           "tokenizer_json": ckpt.tokenizer_json})
        blob = self._broadcast_bytes(blob)
        if self.is_main or not blob:
            return ckpt if self.is_main else None
        d = trainer_state_from_bytes(blob, "the checkpoint rank 0 sent")
        return LoadedCheckpoint(Path(d["path"]), d["step"], d["weights"], d["trainer_state"], d["config_json"],
                                d["tokenizer_json"])

    def _broadcast_bytes(self, data: bytes) -> bytes:
        """Rank 0's `data` on every rank (CPU tensors: gloo)."""
        n = torch.tensor([len(data)], dtype=torch.int64)
        dist.broadcast(n, src=0)
        buf = torch.frombuffer(bytearray(data), dtype=torch.uint8) if self.is_main and len(data) else \
            torch.empty(int(n), dtype=torch.uint8)
        if int(n):
            dist.broadcast(buf, src=0)
        return buf.numpy().tobytes()

    def _all_gather_bytes(self, data: bytes) -> list[bytes]:
        """Every rank's `data`, in rank order, on every rank (padded to the longest for the all-gather)."""
        n = torch.tensor([len(data)], dtype=torch.int64)
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.size)]
        dist.all_gather(sizes, n)
        longest = max(int(s) for s in sizes)
        mine = torch.zeros(longest, dtype=torch.uint8)
        mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        bufs = [torch.empty(longest, dtype=torch.uint8) for _ in range(self.size)]
        dist.all_gather(bufs, mine)
        return [b[: int(s)].numpy().tobytes() for b, s in zip(bufs, sizes, strict=True)]
