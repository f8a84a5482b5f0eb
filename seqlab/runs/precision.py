"""Which number format the training step's matmuls run in (`train.precision`): fp32, or bf16 autocast.

Under bf16 autocast the matmuls (linear, bmm, SDPA, the fused GRU) take bfloat16 inputs and accumulate in
float32; everything autocast leaves alone (norms, softmax, the loss, the optimizer, the weights themselves)
stays float32, and the minGRU scan promotes its gates to float32 itself (`models/mingru._scan_dtype`).

`auto` takes bf16 where the hardware has native bf16 arithmetic: a CUDA device that supports it, or a CPU
whose instruction set has bf16 dot products (x86 AVX512_BF16 or AMX-BF16). On such a CPU bf16 matmuls,
and so whole training steps, run faster than fp32 (`seqlab bench`, bf16; the experiments index). A CPU
without them would convert in software and lose, so there `auto` keeps fp32, and asking for bf16 is
allowed but slow.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch

__all__ = ["PRECISIONS", "autocast_for", "cpu_has_native_bf16", "resolve_precision"]

PRECISIONS = ("auto", "fp32", "bf16")
# /proc/cpuinfo flag names of bf16 dot-product instructions (x86); the Arm ones are named "bf16"
_BF16_FLAGS = {"avx512_bf16", "amx_bf16", "bf16"}


@functools.cache
def cpu_has_native_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """True when the CPU's flags list a bf16 dot-product instruction and PyTorch's oneDNN can use it.
    Off Linux (no /proc/cpuinfo) this answers False: `auto` then keeps fp32, the safe side."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86 names the field flags, Arm Features
            return bool(_BF16_FLAGS & set(value.split()))
    return False


def resolve_precision(precision: str, device: torch.device) -> str:
    """`train.precision` made concrete for `device`: "fp32" or "bf16"."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    if device.type == "cpu":
        return "bf16" if cpu_has_native_bf16() else "fp32"
    return "fp32"  # mps: autocast there is float16 only


def autocast_for(precision: str, device: torch.device) -> Callable[[], AbstractContextManager[Any]]:
    """A factory of the context the forward pass runs in: bf16 autocast on `device`, or nothing."""
    if resolve_precision(precision, device) == "bf16":
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext
