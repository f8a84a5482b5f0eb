"""What runs inside a GPU training step ("gpu" rows of `seqlab bench`, with `seqlab.bench.gpu`).

  sdpa_backends   which kernel `F.scaled_dot_product_attention` dispatches to in a real training step,
                  read from the profiler's operator names (aten::_scaled_dot_product_flash_attention,
                  ..._efficient_attention, ..._cudnn_attention, or ..._attention_math), and each backend
                  forced alone with `torch.nn.attention.sdpa_kernel`: does the step still run, how fast
  recurrent_rows  minGRU's layer training step against the GRU's at one length: seqlab's fused GRU mixer
                  (torch.nn.GRU's kernel: cuDNN on a GPU), a plain torch.nn.GRU, and the GRU's explicit
                  gate-by-gate loop (the sequential GRU a scan is meant to beat; Feng et al. 2024, fig. 1,
                  report minGRU 175x faster than the GRU at L = 512 on a T4, batch 64)

Both run on any device: on a CPU the same code measures the CPU's kernels (the tests run it there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

from seqlab.bench.harness import Step, backward_step, row, time_steps
from seqlab.config import ModelConfig
from seqlab.models.mingru import MinGRUMixer
from seqlab.models.rnn import RecurrentMixer

SECTION = "gpu"
# the aten operator each SDPA backend runs (its forward; "_for_cpu" suffixes are the CPU builds)
BACKEND_OPS = {"flash": "_scaled_dot_product_flash_attention", "efficient": "_scaled_dot_product_efficient_attention",
               "cudnn": "_scaled_dot_product_cudnn_attention", "math": "_scaled_dot_product_attention_math"}
FORCED = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
          "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
FUSED = ("flash", "efficient", "cudnn")


def sync_of(device: torch.device) -> Callable[[], None]:
    """A function that waits for the device's queued work (a no-op on a CPU): every timing ends with it."""
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def backends_in(step: Step, device: torch.device) -> tuple[dict[str, int], list[str]]:
    """Run `step` once under the profiler: ({backend: forward SDPA calls}, the GPU kernels whose names say
    attention). The operator names come from CPU-side recording, which needs no GPU counters."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    try:
        with profile(activities=activities) as prof:
            step()
            sync_of(device)()
    except RuntimeError:  # GPU tracing unavailable (CUPTI refused, as under some sandboxes): operators only
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
            sync_of(device)()
    calls = dict.fromkeys(BACKEND_OPS, 0)
    kernels: set[str] = set()
    for event in prof.events():
        name = event.name
        if "backward" not in name:
            for backend, op in BACKEND_OPS.items():
                if name.startswith(f"aten::{op}"):
                    calls[backend] += 1
        if device.type == "cuda" and getattr(event, "device_type", None) == torch.autograd.DeviceType.CUDA:
            low = name.lower()
            if any(k in low for k in ("flash", "fmha", "attention", "sdpa", "cudnn")):
                kernels.add(name[:120])
    return calls, sorted(kernels)


def forced_runs(step: Step, device: torch.device) -> dict[str, str | None]:
    """{backend: None if the step runs with only that backend allowed, else the first line of its error}."""
    out: dict[str, str | None] = {}
    for name, backend in FORCED.items():
        try:
            with sdpa_kernel([backend]):
                step()
                sync_of(device)()
            out[name] = None
        except RuntimeError as exc:
            out[name] = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    return out


def sdpa_rows(step: Step, device: torch.device, repeats: int, after: Callable[[], None]) -> list[dict[str, Any]]:
    """The backend a training step's attention takes by default, and the step's speed with each backend
    forced alone (timed in rotation). `after` tidies up after a step that failed part-way."""
    calls, kernels = backends_in(step, device)
    total = sum(calls.values())
    chosen = [b for b, n in calls.items() if n] or ["none"]
    fused_share = sum(calls[b] for b in FUSED) / total if total else 0.0
    errors = forced_runs(step, device)
    after()
    ok = [b for b, e in errors.items() if e is None]

    def forced(name: str) -> Step:
        def run() -> None:
            with sdpa_kernel([FORCED[name]]):
                step()

        return run

    sync = sync_of(device)
    secs = time_steps([step] + [forced(b) for b in ok], repeats, 1, sync)
    detail = {"forward_calls": calls, "attention_kernels": kernels, "forced": errors,
              "step_ms": {"default": secs[0] * 1e3, **{b: s * 1e3 for b, s in zip(ok, secs[1:])}}}
    out = [row(SECTION, f"attention kernel in training: {'+'.join(chosen)}",
               "share of the step's forward SDPA calls that took a fused kernel (flash, memory-efficient, cuDNN), "
               "read from the profiler's operator names", fused_share, "share", ">= 1.0", **detail)]
    if "math" in ok:
        out.append(row(SECTION, "training step: math-only SDPA / default", "step time with only the math "
                       "(unfused) attention allowed over the default's: what the fused kernel saves",
                       secs[1 + ok.index("math")] / secs[0], "x", **detail))
    return out


def recurrent_rows(device: torch.device, batch: int, length: int, width: int, repeats: int) -> list[dict[str, Any]]:
    """minGRU's layer training step (forward, a scalar loss, backward) against the GRU's, side by side."""
    torch.manual_seed(0)
    gru_cfg = ModelConfig(mixer="gru", n_embd=width, n_head=1, pos="none", fused_rnn=True)
    fused = RecurrentMixer(gru_cfg, "gru").to(device)
    loop = RecurrentMixer(ModelConfig(mixer="gru", n_embd=width, n_head=1, pos="none", fused_rnn=False),
                          "gru").to(device)
    plain = nn.GRU(width, width, batch_first=True).to(device)
    mingru = MinGRUMixer(ModelConfig(mixer="mingru", n_embd=width, n_head=1, pos="none")).to(device)
    mingru.mode = "scan"
    x = torch.randn(batch, length, width, device=device, requires_grad=True)
    steps = [backward_step(mingru, lambda t: mingru(t)[0], x), backward_step(fused, lambda t: fused(t)[0], x),
             backward_step(plain, lambda t: plain(t)[0], x), backward_step(loop, lambda t: loop(t)[0], x)]
    t_min, t_fused, t_plain, t_loop = time_steps(steps, repeats, 1, sync_of(device))
    sizes = {"B": batch, "L": length, "n_embd": width, "dtype": "float32"}
    times = {"mingru_ms": t_min * 1e3, "gru_fused_ms": t_fused * 1e3, "torch_gru_ms": t_plain * 1e3,
             "gru_loop_ms": t_loop * 1e3, **sizes}
    where = f"L = {length}, B = {batch}, width {width}"
    return [row(SECTION, f"minGRU vs seqlab's fused GRU, L={length}", f"time of the fused GRU mixer's training "
                f"step over minGRU's ({where}; torch.nn.GRU's kernel, cuDNN on a GPU)", t_fused / t_min, "x", **times),
            row(SECTION, f"minGRU vs torch.nn.GRU, L={length}", f"a plain torch.nn.GRU over minGRU ({where})",
                t_plain / t_min, "x", **times),
            row(SECTION, f"minGRU vs the GRU's explicit loop, L={length}", f"the gate-by-gate GRU loop over minGRU "
                f"({where}); Feng et al. 2024 report 175x at L = 512 on a T4", t_loop / t_min, "x", **times)]

