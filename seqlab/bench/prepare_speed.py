"""Throughput and peak memory of `seqlab prepare` on large synthetic corpora.

Writes the corpora once into a cache folder (`prepare_corpora.py`; default out/bench_prepare_cache): mbox
files of N/10, 3N/10 and N messages from `synthetic_messages` (seed 0; default N = 100,000, about 2 KB
each; with --big the sizes are 20,000, 100,000 and 500,000, about 1 GB), a tree of N/10 `.eml` files and
an Enron-layout tree of N/10 messages (`maildir/<user>/<folder>/<n>.`, CRLF line ends, X-From/X-Folder headers, no
References/In-Reply-To, so threads join by subject as in Enron). Each measurement runs `prepare` in a
fresh child process. Rows:

  mbox, byte tokenizer, default workers, at the three sizes   throughput and memory against corpus size
  mbox, byte tokenizer, workers=1, at the smallest           the in-process reference for the speedup
  .eml tree and Enron tree, byte tokenizer, smallest size    many small files instead of one mbox
  mbox, BPE tokenizer (vocab 4096), default workers, smallest the BPE fit and encode stages
  mbox of ~7 KB messages (seed 1), byte, at the smallest      memory when only the message size changes
  `prepare --update` of the largest mbox's last 1% into a      against that size's full prepare above: the
  DATA_DIR of the rest (prepared first, not timed)            share of its wall time (goal under 5%)

Throughput is MB of raw mail (the corpus size on disk) per wall second, overall and per stage:
read+parse+clean, dedupe/spool (main-process time inside the reading loop, overlapped with the workers),
thread/split, tokenizer fit, encode+write. (prepare never imports torch.)
Because this machine may be shared, the table also gives the CPU seconds of the main process and of the
workers, and "cpu-bound MB/s": the rate two free cores would reach if the run were limited by CPU alone,
raw MB / max(main CPU, (main + workers CPU) / 2). Memory: the peak of the whole process tree (the main
process and its parsing workers), sampled every 50 ms from /proc as the sum of RSS (an upper bound:
forked workers share pages with the main process) and of PSS; the main process's own ru_maxrss at the
end of reading and overall; and the bytes its dedupe and thread tables hold. The growth of the tree's
peak per kept email between the smallest and largest run is what stays in memory per email.

`run(...)` returns the rows and `figures(...)`: a list of {name, value, unit, goal, pass} for a
benchmark table (`seqlab bench`).

    python -m seqlab.bench.prepare_speed [--messages N | --big] [--quick] [--workers W] [--json PATH] [--cache DIR]

Each measured `prepare` is a fresh `python -m seqlab.bench.prepare_speed --child` process, so its memory is
its own and torch is never loaded in it, whatever the parent (`seqlab bench` has torch loaded).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from seqlab.bench.prepare_corpora import corpus_bytes, write_corpus, write_enron
from seqlab.bench.results import write_json  # no torch: prepare never needs it
from seqlab.bench.tree_memory import TreeMemory

MB = 1e6
STAGES = (("read+parse", "parse_s"), ("dedupe+spool", "dedupe_spool_s"), ("thread+split", "thread_split_s"),
          ("fit tokenizr", "fit_s"), ("encode+write", "encode_s"))


# ---------------------------------------------------------------- one measured run, in a child process


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """Run `prepare` once; report stage times, CPU times and peak memory of this process and its workers.
    With `update` in `spec`, `prepare --update` of the DATA_DIR `out` instead: its wall time and what it added."""
    from seqlab.data.prepare.options import PrepareConfig
    from seqlab.data.prepare.pipeline import prepare

    if spec.get("update"):
        from seqlab.data.prepare.grow import update

        t0 = time.perf_counter()
        meta = update(spec["source"], Path(spec["out"]), workers=spec["workers"], progress=False)
        return {"wall_s": time.perf_counter() - t0, **{k: meta["update"][k] for k in ("seen", "added", "held")}}

    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    stats: dict[str, Any] = {}
    imap = None
    if spec.get("ca_file"):  # an imaps:// source on a server with a throwaway certificate (imap_speed.py)
        from seqlab.data.mail.imap_auth import ImapOptions

        imap = ImapOptions(ca_file=spec["ca_file"])
    t0 = time.perf_counter()
    meta = prepare(PrepareConfig(spec["source"], tokenizer=spec["tokenizer"], vocab_size=4096), Path(spec["out"]),
                   workers=spec["workers"], progress=False, stats=stats, imap=imap)
    wall = time.perf_counter() - t0
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    stats["parse_s"] = stats["read_s"] - stats["dedupe_spool_s"]
    return {
        "wall_s": wall, "stats": stats, "seen": meta["seen"], "kept": meta["kept"],
        "tokens": sum(s["tokens"] for s in meta["splits"].values()),
        "main_cpu_s": me.ru_utime + me.ru_stime, "workers_cpu_s": kids.ru_utime + kids.ru_stime,
        "rss_start_bytes": rss_start, "peak_rss_bytes": me.ru_maxrss * 1024,
        "worker_peak_rss_bytes": kids.ru_maxrss * 1024,
        "table_bytes_per_email": stats["table_bytes"] / max(stats["kept_emails"], 1),
    }


def measure(name: str, source: Path | str, tokenizer: str, workers: int, messages: int, scratch: Path,
            raw_bytes: int | None = None, ca_file: Path | None = None, env: dict[str, str] | None = None
            ) -> dict[str, Any]:
    """One row: `prepare` of `source` in a fresh child. An imaps:// source (imap_speed.py) gives the size of
    its mail as `raw_bytes`, the certificate to trust as `ca_file`, and the password in the child's `env`."""
    out = scratch / name
    shutil.rmtree(out, ignore_errors=True)
    spec = {"source": str(source), "out": str(out), "tokenizer": tokenizer, "workers": workers,
            "ca_file": None if ca_file is None else str(ca_file)}
    load = os.getloadavg()[0]
    proc = subprocess.Popen([sys.executable, "-m", "seqlab.bench.prepare_speed", "--child", json.dumps(spec)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    with TreeMemory(proc.pid) as tree:
        stdout, stderr = proc.communicate()
    shutil.rmtree(out, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{stderr[-3000:]}")
    row = json.loads(stdout.strip().splitlines()[-1])
    row.update(tree_peak_rss_bytes=tree.peak_rss, tree_peak_pss_bytes=tree.peak_pss)
    raw = corpus_bytes(Path(source)) if raw_bytes is None else raw_bytes
    cpu_bound = max(row["main_cpu_s"], (row["main_cpu_s"] + row["workers_cpu_s"]) / 2)
    row.update(name=name, source=str(source), tokenizer=tokenizer, workers=workers, messages=messages,
               raw_bytes=raw, mb_per_s=raw / MB / row["wall_s"], cpu_bound_mb_per_s_2cores=raw / MB / cpu_bound,
               load_before=load)
    row["stage_mb_per_s"] = {key: raw / MB / max(row["stats"][key], 1e-9) for _, key in STAGES}
    print(f"  {name:<22} {raw / MB:7.1f} MB  {row['wall_s']:6.2f} s  {row['mb_per_s']:5.2f} MB/s  "
          f"peak {row['peak_rss_bytes'] / MB:6.0f} MB, tree {row['tree_peak_rss_bytes'] / MB:6.0f} MB  "
          f"(load {load:.1f})", flush=True)
    return row


def _child_row(spec: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "seqlab.bench.prepare_speed", "--child", json.dumps(spec)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"prepare {spec} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure_update(source: Path, messages: int, workers: int, scratch: Path, full: dict[str, Any],
                   share: float = 0.01) -> dict[str, Any]:
    """`prepare --update` adding the last `share` of the mbox `source` to a DATA_DIR of the rest, against `full`
    (this run's full prepare of the whole mbox): both the wall seconds of the `prepare` call in a fresh child."""
    data = source.read_bytes()
    starts = [m.start() + 2 for m in re.finditer(rb"\n\nFrom bench@example\.com ", data)]  # messages 1..n-1
    cut = starts[max(int(messages * (1 - share)), 1) - 1]
    box, out = scratch / "grow.mbox", scratch / "grow-data"
    shutil.rmtree(out, ignore_errors=True)
    box.write_bytes(data[:cut])
    try:
        _child_row({"source": str(box), "out": str(out), "tokenizer": "byte", "workers": workers})
        with open(box, "ab") as f:
            f.write(data[cut:])
        row = _child_row({"source": str(box), "out": str(out), "workers": workers, "update": True})
    finally:
        shutil.rmtree(out, ignore_errors=True)
        box.unlink(missing_ok=True)
    row.update(messages=messages, share=share, full_wall_s=full["wall_s"], ratio=row["wall_s"] / full["wall_s"])
    print(f"  update of {share:.0%} new mail  {row['wall_s']:6.2f} s against {full['wall_s']:.2f} s for the full "
          f"prepare: {row['ratio']:.1%} (added {row['added']}, {row['held']} already held)", flush=True)
    return row


# ---------------------------------------------------------------- report


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'run':<22} {'msgs':>7} {'MB':>7} {'wall s':>7} {'MB/s':>6} {'cpu-bound':>9} {'main cpu':>8} "
            f"{'wkr cpu':>8} {'main MB':>7} {'tree MB':>7} {'PSS MB':>7} {'tbl B/msg':>9} "
            + " ".join(f"{label[:12]:>12}" for label, _ in STAGES))
    lines = [head, f"{'(2 cores)':>63}{'stage seconds (MB/s of raw mail)':>130}", "-" * len(head)]
    for r in rows:
        stages = " ".join(f"{r['stats'][key]:5.2f}({min(r['stage_mb_per_s'][key], 9999):5.0f})"
                          for _, key in STAGES)
        lines.append(f"{r['name']:<22} {r['messages']:7d} {r['raw_bytes'] / MB:7.1f} {r['wall_s']:7.2f} "
                     f"{r['mb_per_s']:6.2f} {r['cpu_bound_mb_per_s_2cores']:9.2f} {r['main_cpu_s']:8.2f} "
                     f"{r['workers_cpu_s']:8.2f} {r['peak_rss_bytes'] / MB:7.0f} {r['tree_peak_rss_bytes'] / MB:7.0f} "
                     f"{r['tree_peak_pss_bytes'] / MB:7.0f} {r['table_bytes_per_email']:9.0f} {stages}")
    return "\n".join(lines)


def memory_growth(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Peak memory against corpus size (byte/mbox/default-workers runs) and the growth per kept email.

    The whole tree's peak (main process and workers) is the figure that matters; the main process's
    peak at the end of reading shows the streaming stage alone. The dedupe and thread tables are what
    must grow with the corpus; their bytes per email are given beside the growth. The run on messages
    about 3.5x longer, at the same count as the smallest run, shows what memory does when only message
    size changes.
    """
    runs = sorted((r for r in rows if r["name"].startswith("mbox-byte-") and r["workers"] != 1),
                  key=lambda r: r["messages"])
    small, large = runs[0], runs[-1]
    emails = max(large["kept"] - small["kept"], 1)
    long = next((r for r in rows if r["name"].startswith("long-")), None)
    return {
        "tree_peak_rss_mb": {r["messages"]: r["tree_peak_rss_bytes"] / MB for r in runs},
        "tree_peak_pss_mb": {r["messages"]: r["tree_peak_pss_bytes"] / MB for r in runs},
        "read_peak_rss_mb": {r["messages"]: r["stats"]["read_peak_rss_bytes"] / MB for r in runs},
        "peak_rss_mb": {r["messages"]: r["peak_rss_bytes"] / MB for r in runs},
        "tree_bytes_per_email": (large["tree_peak_rss_bytes"] - small["tree_peak_rss_bytes"]) / emails,
        "read_bytes_per_email":
            (large["stats"]["read_peak_rss_bytes"] - small["stats"]["read_peak_rss_bytes"]) / emails,
        "bytes_per_email": (large["peak_rss_bytes"] - small["peak_rss_bytes"]) / emails,
        "table_bytes_per_email": large["table_bytes_per_email"],
        "raw_bytes_per_email": large["raw_bytes"] / large["messages"],
        "long": None if long is None else {
            "messages": long["messages"], "raw_bytes_per_email": long["raw_bytes"] / long["messages"],
            "read_peak_rss_mb": long["stats"]["read_peak_rss_bytes"] / MB, "peak_rss_mb": long["peak_rss_bytes"] / MB},
    }


GOAL_MB_PER_S = 10.0  # on 2 cores: a large mailbox prepared while one waits
GOAL_GROWTH_BYTES_PER_EMAIL = 256  # tables of ~100 B an email, and their copies while threads are found
GOAL_UPDATE_SHARE = 0.05  # `prepare --update` of 1% new mail: under 5% of a full prepare's time


def figures(rows: list[dict[str, Any]], growth: dict[str, Any], update: dict[str, Any] | None = None
            ) -> list[dict[str, Any]]:
    """The benchmark's headline figures: {name, value, unit, goal, pass} each."""
    largest = max((r for r in rows if r["name"].startswith("mbox-byte-") and r["workers"] != 1),
                  key=lambda r: r["messages"])
    enron = next((r for r in rows if r["name"].startswith("enron-")), None)

    def fig(name: str, value: float, unit: str, goal: str | None, ok: bool | None) -> dict[str, Any]:
        return {"name": name, "value": round(value, 3), "unit": unit, "goal": goal, "pass": ok}

    n = largest["messages"]
    out = [
        fig(f"prepare mbox {n:,} msgs", largest["mb_per_s"], "MB/s", f">= {GOAL_MB_PER_S:g}",
            largest["mb_per_s"] >= GOAL_MB_PER_S),
        fig(f"prepare mbox {n:,} msgs, cpu-bound on 2 cores", largest["cpu_bound_mb_per_s_2cores"], "MB/s", None,
            None),
        fig(f"prepare mbox {n:,} msgs, peak memory (process tree RSS)", largest["tree_peak_rss_bytes"] / MB, "MB",
            None, None),
        fig("prepare process-tree peak growth per kept email", growth["tree_bytes_per_email"], "B",
            f"<= {GOAL_GROWTH_BYTES_PER_EMAIL}", growth["tree_bytes_per_email"] <= GOAL_GROWTH_BYTES_PER_EMAIL),
        fig("prepare main-process peak growth per kept email", growth["bytes_per_email"], "B", None, None),
        fig("prepare dedupe + thread tables per kept email", growth["table_bytes_per_email"], "B", None, None),
    ]
    if update is not None:
        out.append(fig(f"prepare --update of {update['share']:.0%} new mail / full prepare, {n:,} msgs",
                       100 * update["ratio"], "%", f"<= {100 * GOAL_UPDATE_SHARE:g}",
                       update["ratio"] <= GOAL_UPDATE_SHARE))
    if enron is not None:
        out += [fig(f"prepare Enron layout {enron['messages']:,} msgs", enron["mb_per_s"], "MB/s",
                    f">= {GOAL_MB_PER_S:g}", enron["mb_per_s"] >= GOAL_MB_PER_S),
                fig(f"prepare Enron layout {enron['messages']:,} msgs, cpu-bound on 2 cores",
                    enron["cpu_bound_mb_per_s_2cores"], "MB/s", f">= {GOAL_MB_PER_S:g}",
                    enron["cpu_bound_mb_per_s_2cores"] >= GOAL_MB_PER_S)]
    return out


def corpus_sizes(messages: int, big: bool) -> list[int]:
    """The three corpus sizes: N/10, 3N/10 and N; with `big`, 20,000, 100,000 and 500,000."""
    if big:
        return [20_000, 100_000, 500_000]
    if messages < 100:
        raise SystemExit("--messages must be at least 100")
    return sorted({messages // 10, 3 * messages // 10, messages})


def run(messages: int = 100_000, big: bool = False, quick: bool = False, workers: int | None = None,
        cache: Path = Path("out/bench_prepare_cache")) -> dict[str, Any]:
    """Write the corpora (once), measure every row, and return rows, memory growth and figures."""
    from seqlab.data.prepare.workers import default_workers

    sizes = corpus_sizes(10_000 if quick else messages, big and not quick)
    workers = workers or default_workers()
    small = sizes[0]
    paths = write_corpus(cache, sizes, small)
    long_path = write_corpus(cache, [small], 0, prefix="long", seed=1, min_words=400, max_words=800)
    enron = write_enron(cache, small)
    scratch = cache / "runs"
    print(f"prepare on {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, workers={workers}")
    rows = [measure(f"mbox-byte-{m}", paths[f"mbox-{m}"], "byte", workers, m, scratch) for m in sizes]
    rows.append(measure(f"mbox-byte-{small}-w1", paths[f"mbox-{small}"], "byte", 1, small, scratch))
    rows.append(measure(f"tree-byte-{small}", paths[f"tree-{small}"], "byte", workers, small, scratch))
    rows.append(measure(f"enron-byte-{small}", enron, "byte", workers, small, scratch))
    rows.append(measure(f"mbox-bpe-{small}", paths[f"mbox-{small}"], "bpe", workers, small, scratch))
    rows.append(measure(f"long-byte-{small}", long_path[f"mbox-{small}"], "byte", workers, small, scratch))
    largest = next(r for r in rows if r["name"] == f"mbox-byte-{sizes[-1]}")
    update = measure_update(paths[f"mbox-{sizes[-1]}"], sizes[-1], workers, scratch, largest)
    growth = memory_growth(rows)
    settings = {"messages": sizes[-1], "sizes": sizes, "workers": workers, "cpus": os.cpu_count(),
                "python": platform.python_version(), "platform": platform.platform()}
    return {"settings": settings, "rows": rows, "memory": growth,
            "speedup_vs_1_worker": rows[0]["mb_per_s"] / rows[len(sizes)]["mb_per_s"],
            "update": update, "figures": figures(rows, growth, update)}


def report(result: dict[str, Any]) -> str:
    rows, growth, sizes = result["rows"], result["memory"], result["settings"]["sizes"]
    small = sizes[0]
    lg = growth["long"]
    lines = ["", table(rows), "",
             "peak memory of the process tree (RSS sum / PSS sum) and of the main process while reading: " + ", ".join(
                 f"{m:,} msgs {growth['tree_peak_rss_mb'][m]:.0f} / {growth['tree_peak_pss_mb'][m]:.0f} MB, "
                 f"main {growth['read_peak_rss_mb'][m]:.0f} MB" for m in sizes),
             f"growth per kept email: {growth['tree_bytes_per_email']:.0f} bytes (process tree), "
             f"{growth['read_bytes_per_email']:.0f} bytes (main, while reading); the dedupe and thread tables "
             f"hold {growth['table_bytes_per_email']:.0f} bytes per email (raw mail: "
             f"{growth['raw_bytes_per_email']:.0f} bytes per message)",
             f"{small:,} messages of {lg['raw_bytes_per_email']:.0f} instead of "
             f"{rows[0]['raw_bytes'] / small:.0f} bytes: main peak while reading {lg['read_peak_rss_mb']:.0f} MB "
             f"vs {growth['read_peak_rss_mb'][small]:.0f} MB",
             f"workers={result['settings']['workers']} vs 1 at {small:,} messages: "
             f"{result['speedup_vs_1_worker']:.2f}x wall", ""]
    for f in result["figures"]:
        verdict = "" if f["pass"] is None else ("PASS" if f["pass"] else "MISS")
        lines.append(f"{f['name']:<58} {f['value']:>10.2f} {f['unit']:<5} {f['goal'] or '':>8} {verdict}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=100_000, help="largest corpus (default 100,000)")
    p.add_argument("--big", action="store_true",
                   help="corpora of 20,000, 100,000 and 500,000 messages (about 1 GB; takes many minutes)")
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
    result = run(messages=args.messages, big=args.big, quick=args.quick, workers=args.workers, cache=args.cache)
    print(report(result))
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
