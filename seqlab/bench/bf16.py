"""Training in bfloat16 on the CPU ("bf16" rows): the bf16 matmul peak, each family's step, minGRU.

Runs only where the CPU has bf16 dot-product instructions (`seqlab.runs.precision.cpu_has_native_bf16`);
elsewhere one "skipped" row says so. A bf16 step is what the trainer runs under train.precision=bf16: the
forward pass (loss included) under `torch.autocast("cpu", dtype=torch.bfloat16)`, the loss computed
in float32 (`lm_loss`), the weights, gradients and optimizer in float32. The fp32 step beside it is the
one of the "throughput" and "layers" sections, timed in the same rotation.

Rows:
  bf16 matmul peak / fp32     (2048, 2048) @ (2048, 2048) in each dtype, timed alternately
  <family> small: bf16 / fp32 tokens/s of the `small` preset's training step (as in "throughput")
  <family> small bf16: MFU    the bf16 step's model FLOPs (`seqlab.training.flops`) over the bf16 peak
  mingru bf16 vs loop, L=512  the minGRU mixer against the explicit GRU loop, both under autocast
  mingru_L<L> bf16            the minGRU mixer against the fused GRU, both under autocast, 1 thread
A goal sits on the rows of the precision the trainer uses by default on this machine (`default_precision`,
the `small` preset's train.precision=auto resolved here):
the goals are about what a user's training does. So with train.precision=auto resolving to bf16
here, the minGRU goals (>= 10x the loop at L = 512, >= 5x the fused GRU at L = 2048) move from the
"layers" rows to these; with fp32 they stay there.
"""

from __future__ import annotations

from typing import Any

import torch

from seqlab.bench.harness import Step, backward_step, row, time_pair, time_steps
from seqlab.bench.throughput import FAMILIES, PEAK_N, family_config, seqlab_step
from seqlab.config import ModelConfig, get_preset
from seqlab.models.mingru import MinGRUMixer
from seqlab.models.rnn import RecurrentMixer
from seqlab.runs.precision import autocast_for, cpu_has_native_bf16, resolve_precision
from seqlab.training.flops import flops_per_token, mfu

SECTION = "bf16"
CPU = torch.device("cpu")


def default_precision(preset: str = "small") -> str:
    """"fp32" or "bf16": what a training run of `preset` uses on this CPU when train.precision is left
    alone (`auto` resolved by `seqlab.runs.precision`)."""
    return resolve_precision(get_preset(preset).train.precision, CPU)


def matmul_step(dtype: torch.dtype, n: int = PEAK_N) -> Step:
    """One (n, n) @ (n, n) matmul in `dtype`."""
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=gen).to(dtype) for _ in range(2))

    def step() -> None:
        torch.mm(a, b)

    return step


def peak_row(repeats: int, n: int = PEAK_N) -> dict[str, Any]:
    """The bf16 matmul peak beside the fp32 one, timed alternately."""
    s32, s16 = time_pair(matmul_step(torch.float32, n), matmul_step(torch.bfloat16, n), repeats, 1)
    g32, g16 = 2.0 * n**3 / s32 / 1e9, 2.0 * n**3 / s16 / 1e9
    return row(SECTION, "bf16 matmul peak / fp32", f"GFLOP/s of a ({n}, {n}) @ ({n}, {n}) matmul in bf16 over fp32",
               g16 / g32, "x", fp32_gflops=g32, bf16_gflops=g16, n=n)


def family_rows(repeats: int, preset: str = "small", peak_n: int = PEAK_N) -> list[dict[str, Any]]:
    """Each family's `small` training step in fp32 and under bf16 autocast, timed in one rotation, then
    both matmul probes: tokens/s ratio and the bf16 step's MFU against the bf16 peak."""
    built = {}
    for family in FAMILIES:
        cfg, batch = family_config(family, preset)
        model, fp32 = seqlab_step(cfg, batch)
        _, bf16 = seqlab_step(cfg, batch, precision="bf16")
        built[family] = (cfg, batch, model, fp32, bf16)
    fns = [s for *_, f32, b16 in built.values() for s in (f32, b16)]
    probes = [matmul_step(torch.float32, peak_n), matmul_step(torch.bfloat16, peak_n)]
    # the probes apart from the steps, right after them (why: `seqlab.bench.throughput.timed_with_peak`)
    secs = time_steps(fns, repeats, 2, settle=1)
    s_mm32, s_mm16 = time_steps(probes, max(3, repeats // 2), 1)
    peak32, peak16 = 2.0 * peak_n**3 / s_mm32 / 1e9, 2.0 * peak_n**3 / s_mm16 / 1e9  # beside these steps
    out = []
    for i, (family, (cfg, batch, model, _, _)) in enumerate(built.items()):
        rate32, rate16 = (batch * cfg.block_size / s for s in secs[2 * i: 2 * i + 2])
        fpt = flops_per_token(model, cfg, cfg.block_size)
        detail = {"tokens_per_s_fp32": rate32, "tokens_per_s_bf16": rate16, "flops_per_token": fpt,
                  "mfu_fp32": mfu(rate32, fpt, peak32), "mfu_bf16": mfu(rate16, fpt, peak16),
                  "peak_gflops_fp32": peak32, "peak_gflops_bf16": peak16, "batch": batch, "window": cfg.block_size}
        out.append(row(SECTION, f"{family} {preset}: bf16 / fp32", f"tokens/s of seqlab's {family} LM training step "
                       f"(`{preset}` preset) under bf16 autocast over fp32, timed in rotation", rate16 / rate32, "x",
                       **detail))
        out.append(row(SECTION, f"{family} {preset} bf16: MFU", "the bf16 step's model FLOPs / the bf16 matmul peak",
                       mfu(rate16, fpt, peak16), "MFU", **detail))
    return out


def _mixers(C: int) -> tuple[MinGRUMixer, torch.nn.GRU, RecurrentMixer]:
    """(minGRU mixer in scan mode, torch.nn.GRU (PyTorch's fused kernel), explicit-loop GRU mixer), width C."""
    torch.manual_seed(0)
    mingru = MinGRUMixer(ModelConfig(mixer="mingru", n_embd=C, n_head=1, pos="none"))
    mingru.mode = "scan"
    fused = torch.nn.GRU(C, C, batch_first=True)  # "the fused GRU": PyTorch's kernel, not the trainer's loop
    loop = RecurrentMixer(ModelConfig(mixer="gru", n_embd=C, n_head=1, pos="none", fused_rnn=False), "gru")
    assert not loop.uses_fused()
    return mingru, fused, loop


def mixer_step(mixer: torch.nn.Module, x: torch.Tensor, precision: str) -> Step:
    """`layers`' training step of a mixer (forward, mean-square loss, backward) in `precision`."""
    ctx = autocast_for(precision, CPU)

    def run(t: torch.Tensor) -> torch.Tensor:
        with ctx():
            return mixer(t)[0]

    return backward_step(mixer, run, x)


def mingru_rows(lens: list[int], batch: int, C: int, repeats: int, loop_len: int, goals: bool) -> list[dict[str, Any]]:
    """minGRU against the fused GRU at each L (and the explicit loop at `loop_len`), both sides under bf16
    autocast and in fp32, all four (five) timed in one rotation on 1 thread; `goals`: the minGRU goals
    sit on these rows."""
    mingru, fused, loop = _mixers(C)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    out = []
    try:
        for L in lens:
            x = torch.randn(batch, L, C, requires_grad=True)
            fns = [mixer_step(m, x, p) for p in ("bf16", "fp32") for m in (mingru, fused)]
            if L == loop_len:
                fns.append(mixer_step(loop, x, "bf16"))
            min16, gru16, min32, gru32, *loop16 = time_steps(fns, repeats, 1)
            sizes = {"B": batch, "L": L, "n_embd": C, "mingru_bf16_ms": min16 * 1e3, "gru_bf16_ms": gru16 * 1e3,
                     "mingru_fp32_ms": min32 * 1e3, "gru_fp32_ms": gru32 * 1e3, "fp32_speedup": gru32 / min32,
                     "mingru_bf16_over_fp32": min32 / min16, "gru_bf16_over_fp32": gru32 / gru16}
            if loop16:
                out.append(row(SECTION, f"mingru bf16 vs loop, L={L}", "explicit GRU loop / minGRU scan, training "
                               "step time, both under bf16 autocast, 1 thread", loop16[0] / min16, "x",
                               ">= 10.0" if goals else "", loop_bf16_ms=loop16[0] * 1e3, **sizes))
            out.append(row(SECTION, f"mingru_L{L} bf16", "fused GRU / minGRU mixer, training step time, both "
                           "under bf16 autocast, 1 thread", gru16 / min16, "x",
                           ">= 5.0" if goals and L == 2048 else "", **sizes))
    finally:
        torch.set_num_threads(before)
    return out


def rows(quick: bool, threads: int) -> list[dict[str, Any]]:
    """Every bf16 row at `threads` torch threads (the minGRU rows on 1), or one skipped row."""
    if not cpu_has_native_bf16():
        return [row(SECTION, "skipped: this CPU has no bf16 dot-product instructions", "", 0.0, "skipped")]
    goals = default_precision() == "bf16"
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        if quick:
            return [peak_row(3, 512), *family_rows(2, "tiny", 512),
                    *mingru_rows([128, 256], 4, 64, 1, loop_len=128, goals=goals)]
        return [peak_row(5), *family_rows(7), *mingru_rows([512, 2048, 8192], 8, 256, 3, loop_len=512, goals=goals)]
    finally:
        torch.set_num_threads(before)
