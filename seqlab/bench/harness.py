"""What every benchmark shares: rows with a goal, side-by-side timing, the machine, and the JSON file.

A row is one ratio (or rate) measured in this run, with the goal it is held to and PASS/MISS:

    {"section", "name", "what", "value", "unit", "goal", "pass", "detail"}

`goal` is a comparison like ">= 1.0" against `value` ("" when the row is only informative; then
`pass` is None). Two things compared in a row are timed alternately (A B, B A, ...) after a warm-up,
and the median is kept, so both see the same load of a shared machine.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

Step = Callable[[], None]


def check_goal(value: float, goal: str) -> bool | None:
    """`goal` as ">= x" or "<= x" applied to value; None for an informative row (goal "")."""
    if not goal:
        return None
    op, _, bound = goal.partition(" ")
    limit = float(bound.rstrip("x%"))
    return value >= limit if op == ">=" else value <= limit


def row(section: str, name: str, what: str, value: float, unit: str, goal: str = "",
        **detail: Any) -> dict[str, Any]:
    """One row of the table; `detail` (sizes, times, the two sides' rates) goes to bench.json only."""
    return {"section": section, "name": name, "what": what, "value": float(value), "unit": unit, "goal": goal,
            "pass": check_goal(float(value), goal), "detail": detail}


def time_pair(a: Step, b: Step, repeats: int, warmup: int, sync: Callable[[], None] = lambda: None
              ) -> tuple[float, float]:
    """Median seconds of a and b, timed alternately (a b, b a, ...) after `warmup` runs of each."""
    for _ in range(warmup):
        a(), b()
    sync()
    times: tuple[list[float], list[float]] = ([], [])
    for r in range(repeats):
        for which in ((0, 1) if r % 2 == 0 else (1, 0)):
            t0 = time.perf_counter()
            (a if which == 0 else b)()
            sync()
            times[which].append(time.perf_counter() - t0)
    return statistics.median(times[0]), statistics.median(times[1])


def time_steps(fns: list[Step], repeats: int, warmup: int, sync: Callable[[], None] = lambda: None,
               settle: int = 0) -> list[float]:
    """Median seconds of each of several steps, timed in rotating order after `warmup` runs of each
    (`sync` waits for a GPU's queued work before each clock read).

    settle: untimed runs of a step right before each timed one. A step that follows a very different one
    (a large matmul probe) pays for the caches and freed pages that one left behind, and the rotation
    does not spread that evenly: with the probe last of n steps, the first step follows it in n - 1 of
    every n rounds. One settling run makes each timed step follow itself, as in a training loop."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    sync()
    times: list[list[float]] = [[] for _ in fns]
    for r in range(repeats):
        order = list(range(len(fns)))
        order = order[r % len(fns):] + order[: r % len(fns)]
        for i in order:
            for _ in range(settle):
                fns[i]()
            sync()
            t0 = time.perf_counter()
            fns[i]()
            sync()
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def backward_step(module: nn.Module, run: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> Step:
    """A closure doing forward, mean-square loss, backward, and dropping the gradients again."""

    def step() -> None:
        y = run(x)
        y.float().pow(2).mean().backward()
        module.zero_grad(set_to_none=True)
        x.grad = None

    return step


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (else what `platform` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(peak_gflops: float | None = None, bf16_peak_gflops: float | None = None) -> dict[str, Any]:
    """torch and Python versions, threads, CPUs, the CPU model, load, the OpenMP wait policy, and the
    matmul peaks when given (bf16: only where the CPU has bf16 instructions)."""
    info: dict[str, Any] = {
        "torch": torch.__version__, "python": platform.python_version(), "threads": torch.get_num_threads(),
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu": cpu_model(), "machine": platform.machine(), "load_1min": os.getloadavg()[0],
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
    }
    if peak_gflops is not None:
        info["fp32_matmul_peak_gflops"] = round(peak_gflops, 1)
    if bf16_peak_gflops is not None:
        info["bf16_matmul_peak_gflops"] = round(bf16_peak_gflops, 1)
    return info
