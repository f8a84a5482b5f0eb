"""Layer speed ratios against PyTorch built-ins, measured side by side in one run (`seqlab bench`, "layers").

Rows (each a training step: forward, a scalar loss, backward):
  attention  our MultiHeadAttention vs torch.nn.MultiheadAttention, causal     goal: ours/torch <= 1.0
  gru_fused  our RecurrentMixer('gru'), fused path, vs torch.nn.GRU             goal: throughput ratio >= 0.95
  mingru     minGRU parallel scan vs the explicit GRU time loop, L = 512        goal: >= 10x faster
  mingru_L*  the minGRU mixer vs torch.nn.GRU's fused kernel at L = 512, 2048, 8192, goal: >= 5x faster at 2048
             on 1 thread
  (these rows are fp32; the two minGRU goals sit here only when training defaults to fp32 on this
  machine, else on the bf16 rows of `seqlab.bench.bf16`, which say why)
  mingru_scan  the chunked linear-space scan vs the log-space scan at L = 2048  goal: not slower
  mingru_ceiling  the fused GRU step vs the minGRU mixer's nine matmuls alone at L = 2048 (informative):
             the most mingru_L2048 could reach if every elementwise and scan step cost nothing

The two sides of a row are timed alternately (A B B A ...) after a warm-up, and the median of the
repeats is kept, so both see the same machine load (`seqlab.bench.harness.time_pair`).

    python -m seqlab.bench.layers [--quick] [--threads 2] [--device cpu|cuda] [--json PATH]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from torch import nn

from seqlab.bench.bf16 import default_precision
from seqlab.bench.harness import Step, backward_step, machine_info, row, time_pair
from seqlab.bench.results import write_json
from seqlab.config import ModelConfig
from seqlab.models.attention import MultiHeadAttention
from seqlab.models.mingru import MinGRUMixer, mingru_scan_log
from seqlab.models.rnn import RecurrentMixer

train_step = backward_step


def _pair(device: torch.device, a: Step, b: Step, repeats: int, warmup: int) -> tuple[float, float]:
    """`time_pair` with a CUDA synchronisation after each step when the device is a GPU."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    return time_pair(a, b, repeats, warmup, sync)


def _row(name: str, ours: str, ref: str, t_ours: float, t_ref: float, metric: str, goal: str, ok: bool,
         value: float, sizes: dict[str, int]) -> dict[str, Any]:
    del ok  # the goal decides (common.check_goal)
    return row("layers", name, f"{ours} vs {ref}: {metric}", value, "x", "" if goal == "-" else goal,
               ours_ms=t_ours * 1e3, reference_ms=t_ref * 1e3, sizes=sizes)


def bench_attention(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """(a) our MultiHeadAttention vs torch.nn.MultiheadAttention, causal self-attention, fwd+bwd."""
    B, L, C, H = args.batch, args.attn_len, args.n_embd, args.n_head
    ours = MultiHeadAttention(C, H, bias=False).to(device)
    ref = nn.MultiheadAttention(C, H, bias=False, batch_first=True).to(device)
    x = torch.randn(B, L, C, device=device, requires_grad=True)
    causal = torch.ones(L, L, dtype=torch.bool, device=device).triu(1)  # True = may not attend

    def run_ref(t: torch.Tensor) -> torch.Tensor:
        return ref(t, t, t, attn_mask=causal, is_causal=True, need_weights=False)[0]

    t_ours, t_ref = _pair(device, train_step(ours, lambda t: ours(t)[0], x), train_step(ref, run_ref, x),
                              args.repeats, args.warmup)
    ratio = t_ours / t_ref
    return _row("attention", "MultiHeadAttention (causal)", "torch.nn.MultiheadAttention (causal)", t_ours,
                t_ref, "time ours / torch", "<= 1.0", ratio <= 1.0, ratio, {"B": B, "L": L, "n_embd": C, "n_head": H})


def bench_gru_fused(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """(b) our GRU layer through its fused path vs a plain torch.nn.GRU of the same size, fwd+bwd."""
    B, L, C = args.gru_batch, args.gru_len, args.n_embd
    cfg = ModelConfig(mixer="gru", n_embd=C, n_head=1, pos="none", fused_rnn=True)
    ours = RecurrentMixer(cfg, "gru").to(device)
    ref = nn.GRU(C, C, batch_first=True).to(device)
    x = torch.randn(B, L, C, device=device, requires_grad=True)
    assert ours.uses_fused()
    t_ours, t_ref = _pair(device, train_step(ours, lambda t: ours(t)[0], x), train_step(ref, lambda t: ref(t)[0], x),
                              args.repeats, args.warmup)
    throughput = t_ref / t_ours  # tokens/s ours over tokens/s torch
    return _row("gru_fused", "RecurrentMixer('gru') fused path", "torch.nn.GRU", t_ours, t_ref,
                "throughput ours / torch", ">= 0.95", throughput >= 0.95, throughput, {"B": B, "L": L, "n_embd": C})


def bench_mingru(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """(c) minGRU (scan, with its output projection) vs the explicit gate-by-gate GRU loop, fwd+bwd."""
    B, L, C = args.scan_batch, args.scan_len, args.n_embd
    cfg = ModelConfig(mixer="gru", n_embd=C, n_head=1, pos="none", fused_rnn=False)
    loop = RecurrentMixer(cfg, "gru").to(device)
    mingru = MinGRUMixer(ModelConfig(mixer="mingru", n_embd=C, n_head=1, pos="none")).to(device)
    mingru.mode = "scan"
    x = torch.randn(B, L, C, device=device, requires_grad=True)
    assert not loop.uses_fused()
    t_scan, t_loop = _pair(device, train_step(mingru, lambda t: mingru(t)[0], x),
                               train_step(loop, lambda t: loop(t)[0], x), args.repeats, args.warmup)
    speedup = t_loop / t_scan
    goal = ">= 10.0" if default_precision() == "fp32" else "-"
    return _row("mingru", "MinGRUMixer parallel scan", "RecurrentMixer('gru') explicit loop", t_scan, t_loop,
                "speedup loop / scan", goal, speedup >= 10.0, speedup, {"B": B, "L": L, "n_embd": C})


def bench_mingru_long(args: argparse.Namespace, device: torch.device) -> list[dict[str, Any]]:
    """(d) the minGRU mixer (linear scan) vs the fused GRU mixer at long lengths, and vs its own log-space
    scan (the reference form), fwd+bwd, batch --scan-batch, width --n-embd."""
    B, C = args.scan_batch, args.n_embd
    fused = nn.GRU(C, C, batch_first=True).to(device)  # PyTorch's kernel, as the rows say, not the trainer's loop
    mingru = MinGRUMixer(ModelConfig(mixer="mingru", n_embd=C, n_head=1, pos="none")).to(device)
    mingru.mode = "scan"
    rnn = mingru.rnn

    def log_space(t: torch.Tensor) -> torch.Tensor:
        return mingru.proj(mingru_scan_log(rnn.linear_z(t), rnn.linear_h(t))[0])

    rows = []
    for L in args.long_lens:
        x = torch.randn(B, L, C, device=device, requires_grad=True)
        t_min, t_gru = _pair(device, train_step(mingru, lambda t: mingru(t)[0], x),
                                 train_step(fused, lambda t: fused(t)[0], x), args.long_repeats, 1)
        speedup = t_gru / t_min
        goal = L == 2048 and default_precision() == "fp32"
        rows.append(_row(f"mingru_L{L}", "MinGRUMixer linear scan", "torch.nn.GRU (PyTorch's fused kernel)",
                         t_min, t_gru, "speedup fused GRU / minGRU", ">= 5.0" if goal else "-",
                         speedup >= 5.0 if goal else True, speedup, {"B": B, "L": L, "n_embd": C}))
    L = args.long_lens[min(1, len(args.long_lens) - 1)]
    x = torch.randn(B, L, C, device=device, requires_grad=True)
    t_lin, t_log = _pair(device, train_step(mingru, lambda t: mingru(t)[0], x), train_step(mingru, log_space, x),
                             args.long_repeats, 1)
    rows.append(_row("mingru_scan", "linear scan (chunked)", "log-space scan (Heinsen 2023)", t_lin, t_log,
                     "speedup log / linear", ">= 1.0", t_log >= t_lin, t_log / t_lin, {"B": B, "L": L, "n_embd": C}))
    t_mm, t_gru = _pair(device, _matmuls_step(mingru, x), train_step(fused, lambda t: fused(t)[0], x),
                        args.long_repeats, 1)
    rows.append(_row("mingru_ceiling", "the minGRU mixer's 9 matmuls alone", "torch.nn.GRU (fused kernel)", t_mm,
                     t_gru, "bound on speedup fused GRU / minGRU", "-", True, t_gru / t_mm,
                     {"B": B, "L": L, "n_embd": C, "matmul_share_of_mingru_step": t_mm / t_lin}))
    return rows


def _matmuls_step(mixer: MinGRUMixer, x: torch.Tensor) -> Step:
    """Only the matrix products of one minGRU mixer training step, at its shapes, with no elementwise work:
    forward z and h~ pre-activations (x W^T + b) and the output projection; backward each weight's
    gradient (grad^T input) and each input's gradient (grad W). The gradients are stand-ins (random
    tensors made once), which costs a matmul the same as the real ones."""
    rnn, B, L, C = mixer.rnn, *x.shape
    H = rnn.hidden_size
    x2 = x.detach().reshape(B * L, C)
    w_z, b_z, w_h, b_h = (t.detach() for t in (rnn.linear_z.weight, rnn.linear_z.bias, rnn.linear_h.weight,
                                                rnn.linear_h.bias))
    w_p = mixer.proj.weight.detach()
    h, g_y, g_z, g_h = (torch.randn(B * L, H, device=x.device) for _ in range(4))

    def step() -> None:
        torch.addmm(b_z, x2, w_z.t()), torch.addmm(b_h, x2, w_h.t()), torch.mm(h, w_p.t())  # forward
        torch.mm(g_y.t(), h), torch.mm(g_y, w_p)  # projection: weight and input gradients
        torch.mm(g_z.t(), x2), torch.mm(g_h.t(), x2), torch.mm(g_z, w_z), torch.mm(g_h, w_h)  # the gates'

    return step


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", type=Path, default=Path("out/bench_layers.json"), help="where to write the results")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads (fixed for the whole run)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="small sizes and few repeats: a smoke run")
    p.add_argument("--n-embd", type=int, default=256)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--batch", type=int, default=8, help="attention batch")
    p.add_argument("--attn-len", type=int, default=256)
    p.add_argument("--gru-batch", type=int, default=16)
    p.add_argument("--gru-len", type=int, default=256)
    p.add_argument("--scan-batch", type=int, default=8)
    p.add_argument("--scan-len", type=int, default=512)
    p.add_argument("--long-lens", type=lambda s: [int(v) for v in s.split(",")], default=[512, 2048, 8192],
                   help="lengths of the minGRU vs fused GRU rows")
    p.add_argument("--long-repeats", type=int, default=3)
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.warmup = 3, 1
        args.n_embd, args.attn_len, args.gru_len, args.scan_len = 64, 64, 64, 128
        args.long_lens, args.long_repeats = [128, 256], 1
    return args


def rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every row of this benchmark: attention, GRU and minGRU at --threads, the long minGRU rows on 1 thread."""
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda was asked for but CUDA is not available")
    device = torch.device(args.device)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(args.threads)
        torch.manual_seed(0)
        out = [bench_attention(args, device), bench_gru_fused(args, device), bench_mingru(args, device)]
        torch.set_num_threads(1)  # minGRU against the fused GRU on one thread: the scan's own work, not threading
        return out + bench_mingru_long(args, device)
    finally:
        torch.set_num_threads(before)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = rows(args)
    print(f"{'row':<14} {'ours ms':>9} {'ref ms':>9} {'value':>7}  {'goal':<8} result")
    for r in out:
        d = r["detail"]
        result = "" if r["pass"] is None else ("PASS" if r["pass"] else "MISS")
        print(f"{r['name']:<14} {d['ours_ms']:9.2f} {d['reference_ms']:9.2f} {r['value']:7.3f}  {r['goal']:<8} "
              f"{result}")
    settings = {**machine_info(), "threads": args.threads, "device": args.device, "repeats": args.repeats,
                "warmup": args.warmup, "quick": args.quick}
    write_json(args.json, {"settings": settings, "rows": out})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
