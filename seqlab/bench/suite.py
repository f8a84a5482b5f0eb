"""`seqlab bench`: every benchmark in one process tree, one bench.json and one bench.md table.

Sections, in order (each a module of this package; `--only` picks some):
  layers      our layers against PyTorch built-ins; minGRU against the fused GRU at long L (`layers`)
  throughput  tokens/s, FLOPs per token and MFU of each family; seqlab against plain PyTorch (`throughput`);
              the trainer's allocator setting on and off (`allocator`)
  bf16        on a CPU with bf16 instructions: the bf16 matmul peak, each family's training step under bf16
              autocast against fp32, minGRU against the GRU in bf16 (`bf16`); one "skipped" row elsewhere
  evaluation  evaluation of a whole split against training tokens/s (`eval_speed`); the saved-characters
              typing and `eval --dynamic` against the recipe's training minutes (`proposal_speed`,
              `dynamic_speed`; the latter not with --quick)
  compile     torch.compile per family: compile seconds, steady rate, the 10-minute gain (`compiled`)
  threads     the default thread policy beside a busy process (`contention`)
  prepare     `seqlab prepare`'s MB/s and memory on synthetic mboxes, each run a fresh process
              (`prepare_speed`); IMAP from a local Dovecot against the same mbox (`imap_speed`)
  latency     per-keystroke latency of the server, kept state against recompute (`latency`)
  browser     key -> ghost in headless Chromium, the compose page and the extension, a 150 ms debounce
              against asking at once (`latency_browser`); one "skipped" row without chromium or a run
  recipe      the speed probe's share of a 10-minute budget, and the real trainer's share of the probe's
              step rate (`recipe_probe`); one "skipped" row when the recipe table has no curves
  gpu         on a CUDA device: its bf16 matmul peak, the `base` preset's training tokens/s and MFU, the
              attention kernel in use, minGRU against the GRU at L = 512 (`gpu`); one "skipped" row
              without CUDA

The machine (torch, threads, CPUs, CPU model, the fp32 matmul peak at 2048 x 2048 measured at start, and
the bf16 one beside it where the CPU has bf16 instructions) heads both files. A section that fails is
recorded with its error and the others still run.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from seqlab.bench import SECTIONS
from seqlab.bench.harness import machine_info, row
from seqlab.bench.results import markdown, write_json
from seqlab.runs.precision import cpu_has_native_bf16
from seqlab.training.flops import matmul_peak_gflops


def _layers(out: Path, quick: bool, threads: int) -> list[dict[str, Any]]:
    from seqlab.bench import layers

    args = layers.parse_args(["--quick"] if quick else [])
    args.threads = threads
    return layers.rows(args)


def _throughput(out: Path, quick: bool, threads: int) -> list[dict[str, Any]]:
    from seqlab.bench import allocator, throughput

    return throughput.rows(quick, threads) + allocator.rows(quick, threads)


def _bf16(out: Path, quick: bool, threads: int) -> list[dict[str, Any]]:
    from seqlab.bench import bf16

    return bf16.rows(quick, threads)


def _evaluation(out: Path, quick: bool, threads: int) -> list[dict[str, Any]]:
    from seqlab.bench import eval_speed
    from seqlab.bench.latency import ensure_data

    return eval_speed.rows(ensure_data(out / "cache"), threads, quick)


def _compile(out: Path, quick: bool, threads: int) -> list[dict[str, Any]]:
    from seqlab.bench import compiled

    return compiled.rows(quick, threads)


def _threads(out: Path, quick: bool, threads: int) -> list[dict[str, Any]]:
    from seqlab.bench import contention

    return contention.rows(quick)


def _prepare(out: Path, quick: bool, threads: int) -> list[dict[str, Any]]:
    """prepare_speed's largest byte/mbox run as rows: MB/s (goal >= 10) and the workers' speedup."""
    from seqlab.bench import prepare_speed

    payload = prepare_speed.run(**({"messages": 2000} if quick else {}), cache=out / "cache" / "prepare")
    print(prepare_speed.report(payload))
    write_json(out / "prepare.json", payload)
    runs = [r for r in payload["rows"] if r["name"].startswith("mbox-byte-") and r["workers"] != 1]
    largest = max(runs, key=lambda r: r["messages"])
    detail = {"messages": largest["messages"], "raw_bytes": largest["raw_bytes"], "wall_s": largest["wall_s"]}
    return [row("prepare", f"mbox, byte, {largest['messages']:,} msgs: MB/s", "raw mail MB per wall second",
                largest["mb_per_s"], "MB/s", ">= 10", **detail),
            row("prepare", "the same if CPU-bound on 2 cores", "raw MB / max(main CPU, all CPU / 2)",
                largest["cpu_bound_mb_per_s_2cores"], "MB/s", **detail),
            row("prepare", "workers / 1 worker", "wall-time speedup of the default workers at the smallest size",
                payload["speedup_vs_1_worker"], "x"),
            row("prepare", f"--update of 1% new mail, {largest['messages']:,} msgs: share of a full prepare",
                "wall time of `prepare --update` adding the mbox's last 1% / the full prepare's, same run",
                100 * payload["update"]["ratio"], "%", "<= 5", added=payload["update"]["added"],
                update_wall_s=payload["update"]["wall_s"], full_wall_s=payload["update"]["full_wall_s"]),
            *_imap_prepare(out, payload["settings"]["sizes"][:2], payload["settings"]["workers"])]


def _imap_prepare(out: Path, sizes: list[int], workers: int) -> list[dict[str, Any]]:
    """imap_speed's rows: IMAP prepare from a local Dovecot against the same mail's mbox (or one skipped row)."""
    from seqlab.bench import imap_speed

    result = imap_speed.run(sizes, workers, cache=out / "cache" / "prepare")
    print(imap_speed.report(result))
    write_json(out / "prepare_imap.json", result)
    return imap_speed.rows(result)


def _latency(out: Path, quick: bool, threads: int) -> list[dict[str, Any]]:
    from seqlab.bench import latency

    args = latency.parse_args(["--quick", "--no-http"] if quick else [])
    args.cache, args.json = out / "cache" / "latency", out / "latency.json"
    payload = latency.measure(args)
    write_json(args.json, payload)
    return latency.bench_rows(payload)


def _browser(out: Path, quick: bool, threads: int) -> list[dict[str, Any]]:
    from seqlab.bench import latency_browser
    from seqlab.bench.browser_session import BrowserMissing

    args = latency_browser.parse_args(["--quick", "--json", str(out / "latency_browser.json")] if quick
                                      else ["--json", str(out / "latency_browser.json")])
    try:
        payload = latency_browser.measure(args)
    except BrowserMissing as exc:
        return [row("browser", f"skipped: {exc}", "run `python -m seqlab.bench.latency_browser --run RUN_DIR` "
                    "where chromium and a trained run are", 0.0, "skipped")]
    write_json(args.json, payload)
    return latency_browser.bench_rows(payload)


def _recipe(out: Path, quick: bool, threads: int) -> list[dict[str, Any]]:
    from seqlab.bench import recipe_probe

    return recipe_probe.rows(out / "cache", quick, threads)


def _gpu(out: Path, quick: bool, threads: int) -> list[dict[str, Any]]:
    from seqlab.bench import gpu

    plan = gpu.GpuPlan(steps=20, kernel_repeats=3) if quick else gpu.GpuPlan()
    return gpu.rows(plan)


def run_bench(out: Path, quick: bool = False, only: tuple[str, ...] = SECTIONS) -> dict[str, Any]:
    """Run the chosen sections; write OUT/bench.json and OUT/bench.md; return the payload."""
    t_start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    peak = matmul_peak_gflops(2048)
    peak16 = matmul_peak_gflops(2048, dtype=torch.bfloat16) if cpu_has_native_bf16() else None
    print(f"fp32 matmul peak {peak:.0f} GFLOP/s on {threads} threads"
          + (f", bf16 {peak16:.0f} GFLOP/s" if peak16 else ", no bf16 instructions"), flush=True)
    payload: dict[str, Any] = {"quick": quick, "machine": machine_info(peak, peak16), "rows": [], "errors": {},
                               "sections": {}}
    runners: dict[str, Callable[[], list[dict[str, Any]]]] = {
        "layers": lambda: _layers(out, quick, threads),
        "throughput": lambda: _throughput(out, quick, threads),
        "bf16": lambda: _bf16(out, quick, threads),
        "evaluation": lambda: _evaluation(out, quick, threads),
        "compile": lambda: _compile(out, quick, threads),
        "threads": lambda: _threads(out, quick, threads),
        "prepare": lambda: _prepare(out, quick, threads),
        "latency": lambda: _latency(out, quick, threads),
        "browser": lambda: _browser(out, quick, threads),
        "recipe": lambda: _recipe(out, quick, threads),
        "gpu": lambda: _gpu(out, quick, threads),
    }
    for name in SECTIONS:
        if name not in only:
            continue
        print(f"== {name}", flush=True)
        t0 = time.perf_counter()
        try:
            payload["rows"] += runners[name]()
        except Exception as exc:  # noqa: BLE001 - one broken section must not lose the others' figures
            traceback.print_exc()
            payload["errors"][name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        payload["sections"][name] = {"seconds": round(time.perf_counter() - t0, 1)}
        torch.set_num_threads(threads)
    payload["wall_s"] = round(time.perf_counter() - t_start, 1)
    write_json(out / "bench.json", payload)
    table = markdown(payload)
    (out / "bench.md").write_text(table)
    print(table)
    print(f"wrote {out / 'bench.md'}")
    return payload
