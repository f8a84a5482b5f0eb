"""Model FLOPs per token, the machine's matmul peak, and MFU (model FLOPs utilisation).

How FLOPs are counted (the convention of Kaplan et al. 2020, section 2.1, and PaLM, Chowdhery et al.
2022, appendix B): a weight matrix of N entries costs 2N FLOPs per token forward (a multiply and an
add per entry) and 4N backward (the gradients of its input and of itself), so a training step costs

    6 * N_matmul                                  per token, N_matmul = entries of every weight matrix
                                                  that multiplies activations: linear maps, the GRU/RNN
                                                  input and hidden matrices, and the output head (once,
                                                  also when it is tied); embedding and position tables
                                                  are lookups and count nothing
  + 6 * n_layer * T * C                           attention only: Q K^T and A V cost 2 * T * C each per
                                                  token forward over T keys (12 * n_layer * T * C forward
                                                  and backward); a causal mask halves it on average.

Element-wise work (softmax, norms, gates, the scan, the optimizer) is not counted: MFU measures the
useful arithmetic against the machine's fp32 matmul peak, so the time spent elsewhere shows as a lower
MFU. The peak is measured, not looked up: `matmul_peak_gflops` times square fp32 matmuls.
"""

from __future__ import annotations

import functools
import time

import torch
from torch import nn

from seqlab.config import ModelConfig


def matmul_params(model: nn.Module) -> int:
    """Entries of the weight matrices that multiply activations (see the module docstring).

    Embedding tables are skipped; a head tied to the token embedding is still counted once, under the
    head (it is a matmul there)."""
    total = 0
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            continue
        total += sum(p.numel() for p in module.parameters(recurse=False) if p.dim() >= 2)
    return total


def flops_per_token(model: nn.Module, cfg: ModelConfig, window: int) -> float:
    """Training FLOPs (forward + backward) per token of a window of `window` tokens."""
    attention = 6 * cfg.n_layer * window * cfg.n_embd if cfg.mixer == "attention" else 0
    return 6.0 * matmul_params(model) + attention


@functools.lru_cache(maxsize=8)
def matmul_peak_gflops(n: int = 2048, device: str = "cpu", dtype: torch.dtype = torch.float32,
                       threads: int | None = None) -> float:
    """Best GFLOP/s of an (n, n) @ (n, n) matmul in `dtype` with the current thread setting (`threads` is
    only part of the cache key). One warm-up, then the fastest of a few repeats: the peak, not the mean."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(0)  # its own generator: a run's random streams must not move
    a = torch.randn(n, n, generator=gen).to(dev, dtype)
    b = torch.randn(n, n, generator=gen).to(dev, dtype)
    repeats = 3 if n >= 2048 else 5
    best = float("inf")
    for i in range(repeats + 1):
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        torch.mm(a, b)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        if i:  # the first call is the warm-up
            best = min(best, time.perf_counter() - t0)
    return 2.0 * n**3 / best / 1e9


def mfu(tokens_per_s: float, flops_token: float, peak_gflops: float) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over the measured peak (0..1, above 1 if the peak
    was measured on a busier machine than the step)."""
    return tokens_per_s * flops_token / (peak_gflops * 1e9)


class MFUMeter:
    """MFU of a training run's steps: model FLOPs per processed token (`flops_per_token` at the run's
    window) against the device's matmul peak, measured once per process on first use. The trainer's probe
    is a 1024 x 1024 matmul (tens of milliseconds on a CPU, cheap enough for every run; `seqlab bench`
    measures 2048 x 2048), in bfloat16 where the run trains under bf16 autocast."""

    def __init__(self, model: nn.Module, cfg: ModelConfig, device: torch.device, bf16: bool = False) -> None:
        self.flops_token = flops_per_token(model, cfg, cfg.block_size)
        self.device, self.dtype = device, torch.bfloat16 if bf16 else torch.float32
        self.peak: float | None = None

    def of(self, tokens_per_s: float) -> float:
        """MFU (0..1) at `tokens_per_s` processed tokens (padding included: the model computes on it)."""
        if self.peak is None:
            self.peak = matmul_peak_gflops(1024, str(self.device), self.dtype, torch.get_num_threads())
        return mfu(tokens_per_s, self.flops_token, self.peak)
