"""Where a minGRU mixer's training step spends its time, at the bench's shapes (`seqlab.bench.layers`:
batch 8, width 256), with torch.profiler on 1 thread; and what that implies for the ratio to the fused GRU.

Each op's self CPU time is put in one of four groups:
  matmul       mm / addmm (the gates' and the projection's forward, their weight and input gradients)
  scan         the chunked scan's slice-wise calls (addcmul, mul_, copy_ and the views they take)
  elementwise  the gates, their derivatives, the loss and the bias sums: one pass over (B, L, H) each
  other        autograd bookkeeping and everything else
and the fused GRU step is timed beside it (process time, alternately), so the line at the end says the
ratio measured and the ratio the step would reach if everything but its matmuls cost nothing.

    python benchmarks/profile_mingru.py [--len 2048] [--steps 3] [--top 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from seqlab.bench.common import backward_step
from seqlab.config import ModelConfig
from seqlab.models.mingru import MinGRUMixer
from seqlab.models.rnn import RecurrentMixer

MATMUL = {"aten::mm", "aten::addmm", "aten::bmm"}
SCAN = {"aten::addcmul", "aten::mul_", "aten::copy_", "aten::select", "aten::slice", "aten::as_strided",
        "aten::view", "aten::clone"}


def _group(name: str, calls: int, steps: int) -> str:
    if name in MATMUL:
        return "matmul"
    if name in SCAN and calls > 20 * steps:  # the scan's calls are many and small; a few big ones are passes
        return "scan"
    if name.startswith("aten::"):
        return "elementwise"
    return "other"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--len", type=int, default=2048)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--n-embd", type=int, default=256)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--top", type=int, default=15)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    B, L, C = args.batch, args.len, args.n_embd
    mingru = MinGRUMixer(ModelConfig(mixer="mingru", n_embd=C, n_head=1, pos="none"))
    mingru.mode = "scan"
    gru = RecurrentMixer(ModelConfig(mixer="gru", n_embd=C, n_head=1, pos="none"), "gru")
    x = torch.randn(B, L, C, requires_grad=True)
    steps = {"mingru": backward_step(mingru, lambda t: mingru(t)[0], x),
             "gru": backward_step(gru, lambda t: gru(t)[0], x)}
    for step in steps.values():
        step()
    cpu: dict[str, list[float]] = {k: [] for k in steps}
    for r in range(args.steps):
        for k in (list(steps) if r % 2 == 0 else list(steps)[::-1]):
            t0 = time.process_time()
            steps[k]()
            cpu[k].append(time.process_time() - t0)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            steps["mingru"]()
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events)
    groups: dict[str, float] = {}
    print(f"minGRU mixer training step, B={B} L={L} C={C}, 1 thread, {args.steps} steps profiled")
    print(f"{'op':<28} {'calls/step':>10} {'ms/step':>9} {'share':>7}  group")
    for e in events:
        group = _group(e.key, e.count, args.steps)
        groups[group] = groups.get(group, 0.0) + e.self_cpu_time_total
        if events.index(e) < args.top:
            print(f"{e.key[:28]:<28} {e.count / args.steps:10.0f} {e.self_cpu_time_total / 1e3 / args.steps:9.1f} "
                  f"{e.self_cpu_time_total / total:7.1%}  {group}")
    print("groups: " + ", ".join(f"{k} {v / total:.1%}" for k, v in sorted(groups.items(), key=lambda kv: -kv[1])))
    t_min, t_gru = statistics.median(cpu["mingru"]), statistics.median(cpu["gru"])
    share = groups.get("matmul", 0.0) / total
    print(f"process time per step: minGRU {t_min * 1e3:.0f} ms, fused GRU {t_gru * 1e3:.0f} ms: fused GRU / minGRU "
          f"{t_gru / t_min:.2f}x; with only its matmuls ({share:.0%} of the step) it would be at most "
          f"{t_gru / (t_min * share):.2f}x")


if __name__ == "__main__":
    main()
