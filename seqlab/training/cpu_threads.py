"""How many intra-op threads training uses when `train.threads` is not set: the cores actually free.

On a machine shared with a busy process, torch's default (one thread per core) runs more threads than
there are free cores. OpenMP's parallel regions end at a barrier, so each step waits for the thread the
scheduler parked behind the other process, and spinning idle threads take the core from the one that
works: beside a busy process, more threads than free cores run training far slower than one thread
(`seqlab bench --only threads`; the experiments index). Making idle threads sleep
(OMP_WAIT_POLICY=PASSIVE) cures that but slows GRU training, whose many small per-step regions each pay
a wake-up; so instead the thread count
follows the cores that are free:

    free cores = sum over the CPUs this process may run on (sched_getaffinity) of their idle share
                 over a short window (/proc/stat: idle + iowait jiffies over all jiffies, steal included)
                 + the CPU time this process itself used in the window / the window's length
    threads    = floor(free * cores / CPUs + MARGIN), at least 1, at most torch's default (one thread per
                 physical core: `cores`; with hyper-threading two CPUs make one core) and a cgroup CPU quota

Our own use counts as free (those cores are ours), so the same estimate serves while training runs: every
`every` seconds the trainer's step calls `tick`, which re-estimates over the time since the last check
and changes `torch.set_num_threads` when the count differs (a busy process started, or ended, mid-run).

Who decides, first that applies: `train.threads` (explicit), then OMP_NUM_THREADS in the environment
(torch already follows it; torchrun sets it to 1 per rank), then the free cores. A run whose thread count
may change is not bitwise reproducible; set `train.threads` for that (the resume-exactness guarantee).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

CpuTimes = dict[int, tuple[int, int]]  # CPU index -> (idle jiffies, all jiffies) since boot

MARGIN = 0.3  # a second thread from 1.7 free cores: one thread too many costs far more than one too few
WINDOW_S = 0.2  # the first estimate's window: 20 jiffies per CPU at 100 Hz
EVERY_S = 5.0  # re-estimate while training at most this often (each estimate is a /proc/stat read)


def read_cpu_times(path: Path = Path("/proc/stat")) -> CpuTimes:
    """Per-CPU idle and total jiffies from /proc/stat ("cpuN user nice system idle iowait irq softirq
    steal ..."; guest time is already inside user); {} where the file cannot be read (not Linux)."""
    times: CpuTimes = {}
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return times
    for line in lines:
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or len(fields) < 4:
            continue
        values = [int(v) for v in fields[:8]]
        times[int(name[3:])] = (values[3] + (values[4] if len(values) > 4 else 0), sum(values))
    return times


def idle_cores(before: CpuTimes, after: CpuTimes, cpus: set[int]) -> float | None:
    """Sum over `cpus` of the share of jiffies each spent idle between two readings; None without data."""
    shares = []
    for cpu in cpus:
        if cpu in before and cpu in after:
            idle, total = (a - b for a, b in zip(after[cpu], before[cpu]))
            if total > 0:
                shares.append(min(max(idle / total, 0.0), 1.0))
    return sum(shares) if shares else None


def quota_cores(path: Path = Path("/sys/fs/cgroup/cpu.max")) -> int | None:
    """A cgroup v2 CPU quota ("QUOTA PERIOD", or "max PERIOD" for none) rounded up to cores; None if none."""
    try:
        quota, period = path.read_text().split()[:2]
        return None if quota == "max" else max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        return None


def allowed_cpus() -> set[int]:
    """The CPUs this process may run on (all of them where the OS does not say)."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


# torch's own count (one per physical core, or OMP_NUM_THREADS), read when this module is first imported:
# before a choice made here, or a train.threads of an earlier run in this process, changed it
_TORCH_DEFAULT = torch.get_num_threads()


def torch_default_threads() -> int:
    """torch's own thread count as this process found it."""
    return _TORCH_DEFAULT


def threads_for(free: float, cap: int) -> int:
    """The thread count for `free` cores: floor(free + MARGIN), between 1 and `cap`."""
    return max(1, min(cap, math.floor(free + MARGIN)))


class ThreadChooser:
    """Sets torch's intra-op threads for a training run and keeps them fitted to the free cores.

    `apply()` once at the start, `tick()` after every step (it does nothing until `every` seconds have
    passed). The readers are arguments so a test can play a machine: `reader` returns CpuTimes, `clock`
    wall seconds, `own_cpu` this process's CPU seconds, `sleep` waits out the first window.
    """

    def __init__(self, explicit: int = 0, *, env: Mapping[str, str] = os.environ,
                 reader: Callable[[], CpuTimes] = read_cpu_times, cpus: set[int] | None = None,
                 cap: int | None = None, window: float = WINDOW_S, every: float = EVERY_S,
                 clock: Callable[[], float] = time.monotonic, own_cpu: Callable[[], float] = time.process_time,
                 sleep: Callable[[float], None] = time.sleep, recheck: bool = True) -> None:
        self.explicit, self.env, self.reader = explicit, env, reader
        self.cpus = allowed_cpus() if cpus is None else cpus
        quota, torch_count = quota_cores(), torch_default_threads() if cap is None else cap
        self.cap = min(torch_count, len(self.cpus), quota or len(self.cpus))
        self.per_cpu = min(1.0, torch_count / len(self.cpus))  # cores per CPU: 0.5 with hyper-threading
        self.window, self.every, self.recheck = window, every, recheck
        self.clock, self.own_cpu, self.sleep = clock, own_cpu, sleep
        self.source = ("train.threads" if explicit else
                       "OMP_NUM_THREADS" if env.get("OMP_NUM_THREADS", "").strip() else "free cores")
        self.threads = 0
        self.free: float | None = None
        self.changes: list[dict[str, Any]] = []  # re-checks that changed the count: when, from, to, free
        self._last: tuple[float, float, CpuTimes] | None = None  # (wall, own CPU, CpuTimes) of the last look
        self._start = 0.0  # wall clock of the first look

    @property
    def auto(self) -> bool:
        """Whether the count follows the free cores (neither train.threads nor OMP_NUM_THREADS was given)."""
        return self.source == "free cores"

    def apply(self) -> int:
        """Choose and set the thread count; returns it."""
        if self.explicit:
            torch.set_num_threads(self.explicit)
        elif not self.auto:  # OMP_NUM_THREADS: torch's own default follows it
            torch.set_num_threads(torch_default_threads())
        else:
            self._look()
            self.sleep(self.window)
            free = self._look()
            threads = self.cap if free is None else threads_for(free * self.per_cpu, self.cap)
            self.free = free
            torch.set_num_threads(threads)
        self.threads = torch.get_num_threads()
        return self.threads

    def tick(self) -> None:
        """After a training step: every `every` seconds, re-estimate the free cores and follow them."""
        if not (self.auto and self.recheck) or self._last is None or self.clock() - self._last[0] < self.every:
            return
        free = self._look()
        if free is None:
            return
        self.free = free
        threads = threads_for(free * self.per_cpu, self.cap)
        if threads != self.threads:
            self.changes.append({"after_s": round(self.clock() - self._start, 1), "from": self.threads,
                                 "to": threads, "free_cores": round(free, 2)})
            torch.set_num_threads(threads)
            self.threads = threads

    def _look(self) -> float | None:
        """Read the clocks; the free cores since the previous look (None on the first, or without data)."""
        now, own, times = self.clock(), self.own_cpu(), self.reader()
        last, self._last = self._last, (now, own, times)
        if last is None:
            self._start = now
            return None
        idle = idle_cores(last[2], times, self.cpus)
        if idle is None:
            return None
        return idle + max(own - last[1], 0.0) / max(now - last[0], 1e-9)

    def describe(self) -> dict[str, Any]:
        """What was chosen and why, for run.json."""
        info: dict[str, Any] = {"threads": self.threads, "source": self.source, "cap": self.cap}
        if self.auto:
            info["free_cores"] = None if self.free is None else round(self.free, 2)
            info["changes"] = self.changes
        return info
