"""The prepared GPU check ("gpu" rows of `seqlab bench`): one command for the day a GPU is lent.

    seqlab bench --only gpu --out DIR          (about a minute on one H200 once the machine is up)

Rows, all measured in one process on one device (`GpuPlan` holds the sizes):
  bf16 matmul peak        an (8192, 8192) @ (8192, 8192) bfloat16 matmul, the best round's mean of a
                          few back-to-back products after a warm-up: the peak MFU is measured against
  base preset: tokens/s   the trainer's own `train_step` (bf16 autocast on CUDA, fused AdamW, gradient
                          clipping, the window sampler) for `steps` steps after `warmup` steps, on the
                          offline synthetic corpus prepared by `seqlab prepare synthetic` (our generator)
  base preset: MFU        model FLOPs per token (`training.flops`) x processed tokens/s over that peak
  attention kernel        which SDPA backend the step's attention takes, and the step with each backend
                          forced alone (`gpu_kernels.sdpa_rows`)
  minGRU vs the GRU       layer training steps at L = 512 (`gpu_kernels.recurrent_rows`)

Without CUDA the section is one row, "skipped: no CUDA device", not a failure. A part that fails is a row
saying so (value NaN, MISS) and the other parts still run, so one broken kernel does not lose the rest.
The scratch data and run live in a temporary folder: only bench.json and bench.md land in --out.
`GpuPlan.smoke()` runs the same code on a CPU at tiny sizes (tests/test_bench_gpu.py).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from seqlab.bench.gpu_kernels import SECTION, recurrent_rows, sdpa_rows, sync_of
from seqlab.bench.harness import row
from seqlab.config import get_preset
from seqlab.data.prepare.options import PrepareConfig
from seqlab.data.prepare.pipeline import prepare
from seqlab.training.flops import flops_per_token, mfu
from seqlab.training.trainer import Trainer


@dataclasses.dataclass
class GpuPlan:
    """The sizes of the GPU check; the defaults are the check itself (a few seconds of device time each)."""

    device: str = "cuda"
    preset: str = "base"  # the model trained: 6 layers, 384 wide, 6 heads, RoPE, window 512, batch 64
    emails: int = 2000  # synthetic emails prepared (the speed does not depend on how many)
    warmup: int = 10  # trainer steps before the clock starts (allocator, cuBLAS and cuDNN set-up)
    steps: int = 50  # trainer steps timed
    kernel_repeats: int = 5  # timed rounds of each forced-backend step and each recurrent layer
    peak_n: int = 8192
    peak_rounds: int = 5
    peak_per_round: int = 10
    scan_batch: int = 64  # Feng et al. 2024 time batch 64
    scan_len: int = 512
    scan_width: int = 384  # the base preset's width
    threads: int | None = None  # CPU threads for the trainer (None: its own choice)

    @classmethod
    def smoke(cls) -> GpuPlan:
        """The same code on a CPU at tiny sizes: seconds (the test's plan)."""
        return cls(device="cpu", preset="tiny", emails=60, warmup=1, steps=2, kernel_repeats=1, peak_n=128,
                   peak_rounds=2, peak_per_round=2, scan_batch=2, scan_len=32, scan_width=16, threads=1)


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int, rounds: int, per_round: int) -> float:
    """GFLOP/s of (n, n) @ (n, n) products in `dtype`: the best round's mean over `per_round` products
    back to back, after about 0.3 s of warm-up so a GPU's clocks have risen."""
    gen = torch.Generator(device=device).manual_seed(0)  # its own stream: the global RNG stays put
    a = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    sync = sync_of(device)
    t_end = time.perf_counter() + 0.3
    while time.perf_counter() < t_end:
        torch.mm(a, b)
        sync()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(per_round):
            torch.mm(a, b)
        sync()
        best = min(best, (time.perf_counter() - t0) / per_round)
    return 2.0 * n**3 / best / 1e9


def _device_info(device: torch.device) -> dict[str, Any]:
    if device.type != "cuda":
        return {"device": "cpu", "torch": torch.__version__}
    p = torch.cuda.get_device_properties(device)
    return {"device": p.name, "capability": f"{p.major}.{p.minor}", "multiprocessors": p.multi_processor_count,
            "memory_gib": round(p.total_memory / 2**30, 1), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version()}


def _trainer(plan: GpuPlan, scratch: Path) -> Trainer:
    """The trainer of `plan.preset` on a freshly prepared synthetic DATA_DIR, validation and saving pushed
    past the steps this check runs (it calls `train_step` itself)."""
    data = scratch / "data"
    # parsed in-process: a small corpus, and no worker is forked from a process that holds a CUDA context
    prepare(PrepareConfig("synthetic", count=plan.emails), data, progress=False, workers=1)
    total = plan.warmup + plan.steps + 50
    overrides = [f"train.device={plan.device}", f"train.max_steps={total}", f"train.eval_every={total}",
                 f"train.ckpt_every={total}"] + ([f"train.threads={plan.threads}"] if plan.threads else [])
    return Trainer(data, scratch / "run", get_preset(plan.preset), overrides=overrides, progress=False)


def training_rows(plan: GpuPlan, trainer: Trainer, peak: float, dtype: torch.dtype) -> list[dict[str, Any]]:
    """Tokens/s and MFU of `plan.steps` trainer steps, timed between two synchronisations."""
    sync = sync_of(trainer.device)
    for step in range(plan.warmup):
        trainer.train_step(step)
    sync()
    real_before = trainer.progress.tokens
    t0 = time.perf_counter()
    for step in range(plan.warmup, plan.warmup + plan.steps):
        trainer.train_step(step)
    sync()
    seconds = time.perf_counter() - t0
    cfg = trainer.cfg
    rate = plan.steps * trainer.step_tokens / seconds  # processed tokens, padding included: the model computes them
    fpt = flops_per_token(trainer.model, cfg.model, cfg.model.block_size)
    m = cfg.model
    shape = (f"{m.n_layer} layers x {m.n_embd}, {m.n_head} heads, {m.pos} positions, window {m.block_size}, "
             f"batch {cfg.train.batch_size}")
    detail = {"steps": plan.steps, "warmup": plan.warmup, "seconds": seconds, "step_ms": 1e3 * seconds / plan.steps,
              "tokens_per_step": trainer.step_tokens, "flops_per_token": fpt, "peak_gflops": peak,
              "params": trainer.model.num_params(), "dtype": str(dtype).removeprefix("torch."),
              "real_tokens_per_s": (trainer.progress.tokens - real_before) / seconds, "shape": shape}
    name = f"{plan.preset} preset, {detail['dtype']}"
    return [row(SECTION, f"{name}: tokens/s", f"the trainer's training step ({shape}), processed tokens per "
                "second", rate, "tokens/s", **detail),
            row(SECTION, f"{name}: MFU", "model FLOPs per token x tokens/s over the matmul peak measured "
                "at start", mfu(rate, fpt, peak), "MFU", **detail)]


def _part(name: str, fn: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One part's rows, or a row saying it failed (NaN, MISS) so that the other parts still run."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a failed kernel must not lose the other parts' figures
        traceback.print_exc()
        failed = row(SECTION, f"{name}: failed", f"{type(exc).__name__}: {exc}".splitlines()[0][:300],
                     float("nan"), "failed")
        failed["pass"] = False
        return [failed]


def trained_rows(plan: GpuPlan, device: torch.device, info: dict[str, Any], scratch: Path) -> list[dict[str, Any]]:
    """The matmul peak, then the trainer's step: tokens/s and MFU, and the attention kernel it takes."""
    trainer = _trainer(plan, scratch)
    try:
        dtype = trainer.mfu.dtype  # bfloat16 where the trainer autocasts (CUDA with bf16), else float32
        peak = matmul_peak(device, dtype, plan.peak_n, plan.peak_rounds, plan.peak_per_round)
        label = str(dtype).removeprefix("torch.")
        out = [row(SECTION, f"{info['device']}: {label} matmul peak", f"({plan.peak_n}, {plan.peak_n}) matmuls "
                   f"in {label}, best round's mean", peak / 1e3, "TFLOP/s", **info)]
        out += _part("training", lambda: training_rows(plan, trainer, peak, dtype))
        counter = iter(range(plan.warmup + plan.steps, 10**6))  # step numbers after the timed ones
        out += _part("attention kernel", lambda: sdpa_rows(lambda: trainer.train_step(next(counter)), device,
                                                           plan.kernel_repeats, trainer.opt.zero_grad))
        return out
    finally:
        trainer.lock.release()
        trainer.close()


def rows(plan: GpuPlan | None = None) -> list[dict[str, Any]]:
    """Every GPU row of `plan` (default: the check on CUDA), or the one "skipped" row without CUDA."""
    plan = plan or GpuPlan()
    if plan.device == "cuda" and not torch.cuda.is_available():
        return [row(SECTION, "skipped: no CUDA device", "torch.cuda.is_available() is False here; run "
                    "`seqlab bench --only gpu` on a machine with a GPU", 0.0, "skipped")]
    device = torch.device(plan.device)
    info = _device_info(device)
    with tempfile.TemporaryDirectory(prefix="seqlab-gpu-") as tmp:
        out = _part("trainer", lambda: trained_rows(plan, device, info, Path(tmp)))
    out += _part("minGRU", lambda: recurrent_rows(device, plan.scan_batch, plan.scan_len, plan.scan_width,
                                                  plan.kernel_repeats))
    return out
