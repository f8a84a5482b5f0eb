"""Whether a device runs bfloat16 matmuls natively, and the autocast context of a training precision.

`bf16_native(device)` answers from the hardware, never from a timing (a timed probe on a shared machine
could flip the answer from one run to the next, and with it the numerics of a run):
- CUDA: `torch.cuda.is_bf16_supported()` (compute capability 8.0 and up runs bf16 tensor cores).
- CPU: the CPU has bf16 dot-product instructions (x86 AVX512_BF16 or AMX-BF16), read through torch's
  cpuinfo query (`torch.cpu._is_avx512_bf16_supported`, a private helper, so Linux's /proc/cpuinfo flags
  are the fallback), and oneDNN is built in (`torch.backends.mkldnn`), which is what runs a bf16 matmul
  on those instructions. Without them oneDNN still accepts bf16 but converts to fp32 inside each matmul,
  which is slower than fp32 itself, so such a CPU answers False. Arm CPUs answer False here: their bf16
  matmul speed through torch has not been measured in this project.

`matmul_speedup` times a bf16 matmul against an fp32 one side by side (what `seqlab bench` reports next
to the flag); `resolve_precision("auto", device)` is bf16 exactly where `bf16_native` holds.
On this project's CPU (AMD EPYC with avx512_bf16, 1 thread) a bf16 matmul ran 2.3-2.8x faster than fp32
(2048 x 128 x 384: 75 against 211 GFLOP/s).
"""

from __future__ import annotations

import contextlib
import functools
import platform
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch

PRECISIONS = ("fp32", "bf16", "auto")
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo names of the x86 bf16 dot-product instructions


def _cpuinfo_flags() -> set[str]:
    """The CPU feature flags of Linux's /proc/cpuinfo (empty where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@functools.lru_cache(maxsize=1)
def cpu_bf16_native() -> bool:
    """True when this CPU has bf16 dot-product instructions and torch's oneDNN can use them (docstring)."""
    if platform.machine().lower() not in ("x86_64", "amd64") or not torch.backends.mkldnn.is_available():
        return False
    query = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if all(callable(q) for q in query):
        return any(bool(q()) for q in query)  # type: ignore[misc]
    return bool(_cpuinfo_flags() & set(CPU_BF16_FLAGS))


def bf16_native(device: torch.device | str) -> bool:
    """Whether `device` runs bf16 matmuls natively (module docstring); False for other device types."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return dev.type == "cpu" and cpu_bf16_native()


def resolve_precision(setting: str, device: torch.device | str) -> str:
    """"fp32" or "bf16" for a precision setting: "auto" is bf16 where `bf16_native(device)` holds."""
    if setting not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {setting!r}")
    if setting == "auto":
        return "bf16" if bf16_native(device) else "fp32"
    return setting


def autocast_for(precision: str, device: torch.device | str) -> Callable[[], AbstractContextManager[Any]]:
    """A factory of the context a forward pass runs in: bf16 autocast on the device's type, or nothing."""
    if precision == "bf16":
        dev_type = torch.device(device).type
        return lambda: torch.autocast(dev_type, dtype=torch.bfloat16)
    return contextlib.nullcontext


def matmul_speedup(n: int = 512, repeats: int = 5) -> tuple[float, float]:
    """(fp32, bf16) GFLOP/s of an (n, n) @ (n, n) CPU matmul, medians of `repeats` timed alternately after
    a warm-up of each, with the current thread setting (both saw the same load of a shared machine)."""
    gen = torch.Generator().manual_seed(0)
    a32, b32 = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
    pairs = ((a32, b32), (a32.bfloat16(), b32.bfloat16()))
    times: tuple[list[float], list[float]] = ([], [])
    for r in range(repeats + 1):
        for which in ((0, 1) if r % 2 == 0 else (1, 0)):
            a, b = pairs[which]
            t0 = time.perf_counter()
            torch.mm(a, b)
            if r:  # the first round is the warm-up
                times[which].append(time.perf_counter() - t0)
    flop = 2.0 * n**3
    return flop / statistics.median(times[0]) / 1e9, flop / statistics.median(times[1]) / 1e9
