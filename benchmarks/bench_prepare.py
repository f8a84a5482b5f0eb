"""Throughput and peak memory of `seqlab prepare` on a large synthetic corpus.

Writes the corpus once into a cache folder (default out/bench_prepare_cache): mbox files of N/10, 3N/10
and N messages from `synthetic_messages` (seed 0; default N = 100,000, about 2 KB each) and a tree of
N/10 `.eml` files. Each measurement runs `prepare` in a fresh child process, so its peak RSS
(`ru_maxrss`) belongs to that run alone. Rows:

  mbox, byte tokenizer, default workers, at N/10, 3N/10, N   throughput and memory against corpus size
  mbox, byte tokenizer, workers=1, at N/10                   the in-process reference for the speedup
  .eml tree, byte tokenizer, default workers, at N/10        many small files instead of one mbox
  mbox, BPE tokenizer (vocab 4096), default workers, N/10    the BPE fit and encode stages
  mbox of ~7 KB messages (seed 1), byte, at N/10             memory when only the message size changes

Throughput is MB of raw mail (the corpus size on disk) per wall second, overall and per stage:
read+parse+clean, dedupe/spool (main-process time inside the reading loop, overlapped with the workers),
thread/split, tokenizer fit, encode+write. (prepare never imports torch.)
Because this machine may be shared, the table also gives the CPU seconds of the main process and of the
workers, and "cpu-bound MB/s": the rate two free cores would reach if the run were limited by CPU alone,
raw MB / max(main CPU, (main + workers CPU) / 2). Memory: peak RSS of the main process (which holds the
per-email metadata) at the end of reading and overall, and of the largest worker; the growth per email
between the smallest and largest run is what stays in memory per email.

    python benchmarks/bench_prepare.py [--messages N] [--quick] [--workers W] [--json PATH] [--cache DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MB = 1e6
STAGES = (("read+parse", "parse_s"), ("dedupe+spool", "dedupe_spool_s"), ("thread+split", "thread_split_s"),
          ("fit tokenizr", "fit_s"), ("encode+write", "encode_s"))


# ---------------------------------------------------------------- the corpus, written once


def _mbox_escape(raw: bytes) -> bytes:
    """mboxrd quoting: a body line starting with ">*From " gets one more ">" (seqlab.data.mail.files undoes it)."""
    lines = raw.split(b"\n")
    return b"\n".join(b">" + line if line.lstrip(b">").startswith(b"From ") else line for line in lines)


def write_corpus(cache: Path, sizes: list[int], tree_size: int, prefix: str = "synthetic",
                 seed: int = 0, min_words: int = 40, max_words: int = 200) -> dict[str, Path]:
    """mbox files `<prefix>-<n>.mbox` for each size and (tree_size > 0) a tree `<prefix>-<n>-eml/`.

    Written once: one pass of the generator fills every file (the messages of a smaller corpus are the
    first ones of the largest), and files appear under their final names only when complete.
    """
    from seqlab.data.synthetic.generator import synthetic_messages

    cache.mkdir(parents=True, exist_ok=True)
    paths = {f"mbox-{n}": cache / f"{prefix}-{n}.mbox" for n in sizes}
    tree = cache / f"{prefix}-{tree_size}-eml"
    todo = [n for n in sizes if not paths[f"mbox-{n}"].is_file()]
    make_tree = tree_size > 0 and not tree.is_dir()
    if tree_size > 0:
        paths[f"tree-{tree_size}"] = tree
    if not todo and not make_tree:
        return paths
    total = max(todo + ([tree_size] if make_tree else []))
    print(f"writing {prefix} mail ({total} messages) into {cache} ...", flush=True)
    tmp_tree = cache / f".{tree.name}.tmp"
    if make_tree:
        shutil.rmtree(tmp_tree, ignore_errors=True)
        tmp_tree.mkdir()
    files = {n: open(cache / f".{prefix}-{n}.mbox.tmp", "wb") for n in todo}  # noqa: SIM115
    try:
        messages = synthetic_messages(count=total, seed=seed, min_words=min_words, max_words=max_words)
        for i, (_, raw) in enumerate(messages):
            entry = b"From bench@example.com Mon Jan  8 09:00:00 2024\n" + _mbox_escape(raw).rstrip(b"\n") + b"\n\n"
            for n, f in files.items():
                if i < n:
                    f.write(entry)
            if make_tree and i < tree_size:
                folder = tmp_tree / f"{i // 1000:03d}"  # 1,000 files per folder, as mail tools do
                folder.mkdir(exist_ok=True)
                (folder / f"{i:06d}.eml").write_bytes(raw)
    finally:
        for f in files.values():
            f.close()
    for n in todo:
        os.replace(cache / f".{prefix}-{n}.mbox.tmp", paths[f"mbox-{n}"])
    if make_tree:
        os.replace(tmp_tree, tree)
    return paths


def corpus_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ---------------------------------------------------------------- one measured run, in a child process


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """Run `prepare` once; report stage times, CPU times and peak memory of this process and its workers."""
    from seqlab.data.prepare import prepare

    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    stats: dict[str, Any] = {}
    t0 = time.perf_counter()
    meta = prepare(spec["source"], Path(spec["out"]), tokenizer=spec["tokenizer"], vocab_size=4096,
                   workers=spec["workers"], progress=False, stats=stats)
    wall = time.perf_counter() - t0
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    stats["parse_s"] = stats["read_s"] - stats["dedupe_spool_s"]
    return {
        "wall_s": wall, "stats": stats, "seen": meta["seen"], "kept": meta["kept"],
        "tokens": sum(s["tokens"] for s in meta["splits"].values()),
        "main_cpu_s": me.ru_utime + me.ru_stime, "workers_cpu_s": kids.ru_utime + kids.ru_stime,
        "rss_start_bytes": rss_start, "peak_rss_bytes": me.ru_maxrss * 1024,
        "worker_peak_rss_bytes": kids.ru_maxrss * 1024,
    }


def measure(name: str, source: Path, tokenizer: str, workers: int, messages: int, scratch: Path) -> dict[str, Any]:
    out = scratch / name
    shutil.rmtree(out, ignore_errors=True)
    spec = {"source": str(source), "out": str(out), "tokenizer": tokenizer, "workers": workers}
    load = os.getloadavg()[0]
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True)
    shutil.rmtree(out, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stderr[-3000:]}")
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    raw = corpus_bytes(source)
    cpu_bound = max(row["main_cpu_s"], (row["main_cpu_s"] + row["workers_cpu_s"]) / 2)
    row.update(name=name, source=str(source), tokenizer=tokenizer, workers=workers, messages=messages,
               raw_bytes=raw, mb_per_s=raw / MB / row["wall_s"], cpu_bound_mb_per_s_2cores=raw / MB / cpu_bound,
               load_before=load)
    row["stage_mb_per_s"] = {key: raw / MB / max(row["stats"][key], 1e-9) for _, key in STAGES}
    print(f"  {name:<22} {raw / MB:7.1f} MB  {row['wall_s']:6.2f} s  {row['mb_per_s']:5.2f} MB/s  "
          f"peak {row['peak_rss_bytes'] / MB:6.0f} MB  (load {load:.1f})", flush=True)
    return row


# ---------------------------------------------------------------- report


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'run':<22} {'MB':>7} {'wall s':>7} {'MB/s':>6} {'cpu-bound':>9} {'main cpu':>8} {'wkr cpu':>8} "
            f"{'peak MB':>8} {'wkr MB':>7} " + " ".join(f"{label[:12]:>12}" for label, _ in STAGES))
    lines = [head, f"{'(2 cores)':>55}{'stage seconds (MB/s of raw mail)':>112}", "-" * len(head)]
    for r in rows:
        stages = " ".join(f"{r['stats'][key]:5.2f}({min(r['stage_mb_per_s'][key], 9999):5.0f})"
                          for _, key in STAGES)
        lines.append(f"{r['name']:<22} {r['raw_bytes'] / MB:7.1f} {r['wall_s']:7.2f} {r['mb_per_s']:6.2f} "
                     f"{r['cpu_bound_mb_per_s_2cores']:9.2f} {r['main_cpu_s']:8.2f} {r['workers_cpu_s']:8.2f} "
                     f"{r['peak_rss_bytes'] / MB:8.0f} {r['worker_peak_rss_bytes'] / MB:7.0f} {stages}")
    return "\n".join(lines)


def memory_growth(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Peak RSS against corpus size (byte/mbox/default-workers runs) and the growth per kept email.

    The reading stage's peak is the one that shows streaming (the encode stage adds its write buffers and
    the tokenizer to the final peak). The run on messages about 3.5x longer, at the same
    count as the smallest run, shows what memory does when only message size changes.
    """
    runs = sorted((r for r in rows if r["name"].startswith("mbox-byte-") and r["workers"] != 1),
                  key=lambda r: r["messages"])
    small, large = runs[0], runs[-1]
    emails = max(large["kept"] - small["kept"], 1)
    long = next((r for r in rows if r["name"].startswith("long-")), None)
    return {
        "read_peak_rss_mb": {r["messages"]: r["stats"]["read_peak_rss_bytes"] / MB for r in runs},
        "peak_rss_mb": {r["messages"]: r["peak_rss_bytes"] / MB for r in runs},
        "read_bytes_per_email":
            (large["stats"]["read_peak_rss_bytes"] - small["stats"]["read_peak_rss_bytes"]) / emails,
        "bytes_per_email": (large["peak_rss_bytes"] - small["peak_rss_bytes"]) / emails,
        "raw_bytes_per_email": large["raw_bytes"] / large["messages"],
        "long": None if long is None else {
            "messages": long["messages"], "raw_bytes_per_email": long["raw_bytes"] / long["messages"],
            "read_peak_rss_mb": long["stats"]["read_peak_rss_bytes"] / MB, "peak_rss_mb": long["peak_rss_bytes"] / MB},
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=100_000, help="largest corpus (default 100,000)")
    p.add_argument("--quick", action="store_true", help="a 10,000-message largest corpus, for a fast check")
    p.add_argument("--workers", type=int, default=None, help="parsing processes (default: the CPUs available)")
    p.add_argument("--json", type=Path, default=Path("out/bench_prepare.json"), help="where to write results")
    p.add_argument("--cache", type=Path, default=Path("out/bench_prepare_cache"), help="corpus cache folder")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    from seqlab.bench.results import write_json  # no torch: prepare never needs it
    from seqlab.data.mail.workers import default_workers

    n = 10_000 if args.quick else args.messages
    if n < 100:
        raise SystemExit("--messages must be at least 100")
    sizes = sorted({n // 10, 3 * n // 10, n})
    workers = args.workers or default_workers()
    small = sizes[0]
    paths = write_corpus(args.cache, sizes, small)
    long_path = write_corpus(args.cache, [small], 0, prefix="long", seed=1, min_words=400, max_words=800)
    scratch = args.cache / "runs"
    print(f"prepare on {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, workers={workers}")
    rows = [measure(f"mbox-byte-{m}", paths[f"mbox-{m}"], "byte", workers, m, scratch) for m in sizes]
    rows.append(measure(f"mbox-byte-{small}-w1", paths[f"mbox-{small}"], "byte", 1, small, scratch))
    rows.append(measure(f"tree-byte-{small}", paths[f"tree-{small}"], "byte", workers, small, scratch))
    rows.append(measure(f"mbox-bpe-{small}", paths[f"mbox-{small}"], "bpe", workers, small, scratch))
    rows.append(measure(f"long-byte-{small}", long_path[f"mbox-{small}"], "byte", workers, small, scratch))
    growth = memory_growth(rows)
    speedup = rows[0]["mb_per_s"] / rows[len(sizes)]["mb_per_s"]
    largest = rows[len(sizes) - 1]
    print()
    print(table(rows))
    print()
    print("peak RSS of the main process while reading / overall: " + ", ".join(
        f"{m:,} msgs {growth['read_peak_rss_mb'][m]:.0f} / {growth['peak_rss_mb'][m]:.0f} MB" for m in sizes))
    print(f"growth per kept email: {growth['read_bytes_per_email']:.0f} bytes while reading, "
          f"{growth['bytes_per_email']:.0f} bytes overall (raw mail: {growth['raw_bytes_per_email']:.0f} bytes "
          f"per message)")
    lg = growth["long"]
    print(f"{small:,} messages of {lg['raw_bytes_per_email']:.0f} instead of {rows[0]['raw_bytes'] / small:.0f} bytes: "
          f"peak while reading {lg['read_peak_rss_mb']:.0f} MB vs {growth['read_peak_rss_mb'][small]:.0f} MB")
    print(f"workers={workers} vs 1 at {small:,} messages: {speedup:.2f}x wall; goal >= 10 MB/s on 2 cores: "
          f"measured {largest['mb_per_s']:.2f} MB/s, cpu-bound {largest['cpu_bound_mb_per_s_2cores']:.2f} MB/s "
          f"at {n:,} messages")
    settings = {"messages": n, "sizes": sizes, "workers": workers, "cpus": os.cpu_count(),
                "python": platform.python_version(), "platform": platform.platform()}
    write_json(args.json, {"settings": settings, "rows": rows, "memory": growth, "speedup_vs_1_worker": speedup})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
