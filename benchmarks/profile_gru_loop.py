"""Why minGRU is not 10x the explicit GRU loop at L = 512 (`seqlab bench`, layers row "mingru"): the loop's
training step and the minGRU mixer's, at the bench's shapes (batch 8, width 256), on 1 thread.

For each side: CPU milliseconds per step (unprofiled, median, the two alternating), operator calls per
step, and the profiler's split into matrix multiplies and everything else. For the loop also per time
step: microseconds, operator calls, and the GFLOP/s of its matmuls, whose per-step (B, H) @ (H, 3H)
products are too small (B = 8 rows) to run near the machine's peak. `--precision bf16` runs both under CPU bf16
autocast (the `bf16` bench section's row).

    python benchmarks/profile_gru_loop.py [--len 512] [--batch 8] [--width 256] [--precision fp32|bf16]
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from seqlab.bench.bf16 import mixer_step
from seqlab.config import ModelConfig
from seqlab.models.mingru import MinGRUMixer
from seqlab.models.rnn import RecurrentMixer

MATMUL = {"aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul"}


def profiled(step: object) -> tuple[int, float, float]:
    """(operator calls, matmul self-CPU seconds, all self-CPU seconds) of one run of `step`."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()  # type: ignore[operator]
    calls, mm, total = 0, 0.0, 0.0
    for e in prof.key_averages():
        calls += e.count
        total += e.self_cpu_time_total * 1e-6
        if e.key in MATMUL:
            mm += e.self_cpu_time_total * 1e-6
    return calls, mm, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--len", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    B, L, C = args.batch, args.len, args.width
    loop = RecurrentMixer(ModelConfig(mixer="gru", n_embd=C, n_head=1, pos="none", fused_rnn=False), "gru")
    mingru = MinGRUMixer(ModelConfig(mixer="mingru", n_embd=C, n_head=1, pos="none"))
    mingru.mode = "scan"
    x = torch.randn(B, L, C, requires_grad=True)
    steps = {"loop": mixer_step(loop, x, args.precision), "mingru": mixer_step(mingru, x, args.precision)}
    for s in steps.values():
        s()
    cpu: dict[str, list[float]] = collections.defaultdict(list)
    for r in range(args.repeats):
        for name in (("loop", "mingru") if r % 2 == 0 else ("mingru", "loop")):
            t0 = time.process_time()
            steps[name]()
            cpu[name].append(time.process_time() - t0)
    med = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"B={B} L={L} C={C}, {args.precision}, 1 thread: loop {med['loop'] * 1e3:.1f} ms, minGRU "
          f"{med['mingru'] * 1e3:.1f} ms of CPU per training step: loop / minGRU {med['loop'] / med['mingru']:.2f}x")
    for name in ("loop", "mingru"):
        calls, mm, total = profiled(steps[name])
        print(f"  {name:6s}: {calls:6d} operator calls, matmul {100 * mm / total:4.1f}% of profiled self time")
    calls, mm, total = profiled(steps["loop"])
    # W_ih x for all positions at once and W_hh h per step, each forward and its two gradients backward
    flop = 2 * (2 * B * C * 3 * C * L * 3)
    mm_s = mm / total * med["loop"]
    print(f"  loop per time step: {med['loop'] / L * 1e6:.1f} us, {calls / L:.0f} operator calls "
          f"({med['loop'] / calls * 1e6:.1f} us each on average); its matmuls (W_ih x at once, W_hh h per step) "
          f"run at about "
          f"{flop / mm_s / 1e9:.0f} GFLOP/s")
    print(f"  for 10x the loop, minGRU's step would have to take {med['loop'] / 10 * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
