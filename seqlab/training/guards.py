"""What keeps a training run from losing or spoiling work: the RUN_DIR lock and the non-finite checks.

- `RunLock`: an exclusive `flock` on RUN_DIR/.lock, held for the life of a training process, so a second
  `seqlab train` on the same RUN_DIR (fresh or `--resume`) is refused instead of interleaving checkpoints
  and truncating metrics.jsonl under the first. The kernel drops a flock when its file is closed, which
  also happens when the process dies (SIGKILL included): a killed run never leaves a stale lock. The file
  itself stays (deleting it would let two processes lock two different inodes of the same name).
- `StepGuard` and `grad_norm`: a step whose loss or gradient norm is NaN or infinite is not
  applied, and weights holding NaN or inf are never saved.
- `finite_or_none`: metrics.jsonl stays JSON (`NaN` and `Infinity` are not JSON), a non-finite value is null.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from pathlib import Path
from typing import IO, Any

import torch
from tqdm import tqdm

from seqlab.errors import UserError
from seqlab.private_files import make_private_dirs, private_opener
from seqlab.training.progress import Progress

try:  # POSIX; on Windows there is no flock and training runs unlocked
    import fcntl
except ImportError:  # pragma: no cover - not on the platforms CI runs
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".lock"
NONFINITE_LOSS = "non-finite loss"
NONFINITE_GRAD = "non-finite gradient norm"


def say(message: str) -> None:
    """One plain line on stderr that does not tear the progress bar (tqdm.write moves the bar below it)."""
    tqdm.write(f"seqlab: warning: {message}", file=sys.stderr)


def _silent(message: str) -> None:
    """`say` for a process that leaves the saying to another (ranks other than 0)."""


class RunLock:
    """An exclusive lock on RUN_DIR for one training process (see the module doc). Creates RUN_DIR."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self._file: IO[str] | None = None
        self.created = not self.run_dir.exists()  # so a run refused before it starts leaves no folder behind
        self.acquire()

    def acquire(self) -> None:
        """Take the lock, or raise `UserError` naming RUN_DIR when another process holds it."""
        if self._file is not None or fcntl is None:
            return
        make_private_dirs(self.run_dir)
        f = open(self.run_dir / LOCK_NAME, "a+", encoding="utf-8", opener=private_opener)  # noqa: SIM115
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip()  # the holder's pid, unless it has only just taken the lock
            f.close()
            pid = f" (pid {holder})" if holder.isdigit() else ""
            raise UserError(f"{self.run_dir} is in use by another training process{pid}; wait for it to "
                            f"finish or stop it, or train into another --out") from None
        except OSError as exc:  # a file system without locks (some network mounts): go on, but say so
            f.close()
            say(f"could not lock {self.run_dir} ({exc}); make sure no other process trains into it")
            return
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        self._file = f

    def release(self) -> None:
        """Drop the lock (closing the file drops the flock); harmless when not held."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def discard(self) -> None:
        """Drop the lock of a run refused before it wrote anything (a bad config, a missing checkpoint):
        a RUN_DIR this lock created and that holds only the lock file is removed with it. The file is
        unlinked while still locked, so a process that opened it meanwhile is refused as usual."""
        if self._file is not None and self.created:
            with contextlib.suppress(OSError):
                if [p.name for p in self.run_dir.iterdir()] == [LOCK_NAME]:
                    (self.run_dir / LOCK_NAME).unlink()
                    self.run_dir.rmdir()  # fails, and keeps the folder, if anything appeared meanwhile
        self.release()


class StepGuard:
    """The bad-step bookkeeping of one run: skipped steps are counted in `Progress` (saved with every
    checkpoint, so a resume mid-streak counts on exactly), said on stderr, logged, and after
    `max_in_a_row` of them in a row the run halts; weights are checked before every save."""

    def __init__(self, max_in_a_row: int, *, speak: bool = True) -> None:
        self.max_in_a_row = max_in_a_row
        self.say = say if speak else _silent  # under torchrun only rank 0 speaks (every rank keeps count)
        self.halt: str | None = None  # why the run cannot go on, once it cannot
        self.saved_step: int | None = None  # the newest checkpoint of the run (resumed from or saved)

    def _kept(self) -> str:
        """What is left to go on from, and how: the end of a halt's one sentence."""
        if self.saved_step is None:
            return "no checkpoint was saved; start again with a lower train.lr"
        return f"the last good checkpoint is step {self.saved_step}; resume from it with a lower train.lr"

    def bad_step(self, progress: Progress, reason: str) -> dict[str, Any]:
        """Count a step that was not applied (`progress.step` is the steps done, this one included);
        return its metrics.jsonl record."""
        progress.bad_in_a_row += 1
        progress.skipped_steps += 1
        n = progress.bad_in_a_row
        self.say(f"step {progress.step} skipped: {reason} ({n} in a row; the run stops at {self.max_in_a_row})")
        if n >= self.max_in_a_row:
            self.halt = (f"stopped at step {progress.step}: the loss or its gradient was non-finite at {n} steps "
                         f"in a row (train.max_bad_steps={self.max_in_a_row}); {self._kept()}")
        return {"step": progress.step, "skipped": reason, "bad_in_a_row": n, "elapsed": round(progress.elapsed, 2)}

    def may_go_on(self, model: torch.nn.Module, step: int, check: bool) -> bool:
        """False once the run halted, or, with `check` (before a validation or a save), when the weights
        just became non-finite: nothing is measured or saved after the last good checkpoint."""
        return not self.halt and (not check or self.weights_ok(model, step))

    def weights_ok(self, model: torch.nn.Module, step: int) -> bool:
        """False (said, and the run halts) when a weight holds NaN or inf: such weights are never saved,
        neither as a step checkpoint nor as the best, and the checkpoints before them are kept."""
        bad = nonfinite_weights(model)
        if bad:
            self.say(f"not saving step {step}: non-finite weights in {', '.join(bad[:3])}{' ...' if bad[3:] else ''}")
            self.halt = f"stopped at step {step}: the weights became non-finite; {self._kept()}"
        return not bad


def grad_norm(model: torch.nn.Module, clip: float) -> float:
    """The global gradient norm, after clipping the gradients to `clip` when it is positive. Without
    clipping the norm is still measured (the gradients are left as they are), so that an infinite or NaN
    gradient is caught either way. Clipping an infinite norm scales by inf * 0 = NaN: never step on it."""
    if clip:
        return float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip))
    return float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None]))


def nonfinite_weights(model: torch.nn.Module) -> list[str]:
    """Names of the floating-point parameters and buffers holding a NaN or an infinity."""
    return [name for name, t in model.state_dict().items()
            if t.is_floating_point() and not bool(torch.isfinite(t).all())]


def finite_or_none(record: dict[str, Any]) -> dict[str, Any]:
    """`record` with every non-finite float replaced by None (null in JSON)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
