"""Per-keystroke latency of the autocomplete server, kept state against recompute, measured side by side.

The front of the benchmark: its arguments, `measure` (train or reuse the runs, time them, print the
tables) and the rows it gives `seqlab bench`. The parts live beside it: `latency_runs` (settings, the
cached data and runs, the typed text), `latency_model` (model time: kept vs recompute, the statistics),
`latency_http` (end to end over HTTP), `latency_report` (goals and tables).

Goals: kept p90 <= 15 ms, for 3-word suggestions and for suggestions to the end of the sentence
(`latency_lengths`, with the recipe run beside the two when it exists); kept >= 5x faster than
recompute at 1024 bytes (p50 ratio); the server adds <= 2 ms at p50 over HTTP, of which its access gate
(Host, Origin, token, content type, headers) takes <= 100 us, measured in-process against the same
request without it; keystrokes typed in bursts while the server learns (`serve --learn`) have a p90
<= 1.5x the same keystrokes without it. One torch thread throughout. Prints
tables with PASS/MISS per goal and writes JSON (default out/bench_latency.json); in `seqlab bench` its
goals are the "latency" rows.

    python -m seqlab.bench.latency [--quick] [--cache DIR] [--keystrokes K] [--json PATH]
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from seqlab.bench.harness import machine_info, row
from seqlab.bench.latency_http import bench_http, bench_learning, gate_cost
from seqlab.bench.latency_lengths import bench_lengths, length_goals, length_runs
from seqlab.bench.latency_model import bench_model
from seqlab.bench.latency_report import goals, print_tables
from seqlab.bench.latency_runs import CONTEXTS, MAX_WORDS, ensure_data, ensure_runs, test_text, val_emails
from seqlab.bench.results import write_json

__all__ = ["bench_rows", "ensure_data", "main", "measure", "parse_args"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", type=Path, default=Path("out/bench_latency.json"), help="where to write the results")
    p.add_argument("--cache", type=Path, default=Path("out/bench_latency_cache"),
                   help="data and trained runs, reused when present")
    p.add_argument("--keystrokes", type=int, default=40, help="characters typed after each context")
    p.add_argument("--contexts", default=",".join(map(str, CONTEXTS)), help="context sizes in bytes")
    p.add_argument("--no-http", action="store_true", help="skip the end-to-end HTTP part")
    p.add_argument("--learning-bursts", type=int, default=20,
                   help="bursts of typing against a learning server (serve --learn) and a plain one; 0 skips")
    p.add_argument("--quick", action="store_true",
                   help="tiny preset trained 200 steps, contexts 64 and 1024, 8 keystrokes: a smoke run")
    args = p.parse_args(argv)
    args.contexts = tuple(int(c) for c in args.contexts.split(","))
    if args.quick:
        args.keystrokes = min(args.keystrokes, 8)
        args.contexts = (64, 1024)
        args.learning_bursts = min(args.learning_bursts, 6)
    return args


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Train (or reuse) the two runs, time them, print the tables; the JSON payload."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    t_start = time.perf_counter()
    try:
        print(f"data and runs in {args.cache}", flush=True)
        data, runs = ensure_runs(args.cache, args.quick)
        subject, body = test_text(data, max(args.contexts) + 4 * args.keystrokes)
        print("model time ...", flush=True)
        model_rows, infos = [], {}
        for name, run in runs.items():
            rows_of, infos[name] = bench_model(name, run, subject, body, args.contexts, args.keystrokes)
            model_rows += rows_of
        print("suggestion length: 3 words against the sentence ...", flush=True)
        length_rows = [r for name, run in {**runs, **length_runs()}.items()
                       for r in bench_lengths(name, run, subject, body, args.contexts, args.keystrokes)]
        http_rows: list[dict[str, Any]] = []
        learning_rows: list[dict[str, Any]] = []
        gate = None
        if not args.no_http:
            gate = gate_cost()
            print("HTTP ...", flush=True)
            log_dir = args.cache / "serve-log"
            shutil.rmtree(log_dir, ignore_errors=True)
            for name, run in runs.items():
                http_rows += bench_http(name, run, subject, body, args.contexts, args.keystrokes, log_dir)
            if args.learning_bursts:
                print("keystrokes while the server learns ...", flush=True)
                sent = val_emails(data, 20)
                learning_rows = [bench_learning(name, run, subject, body, sent, args.learning_bursts, log_dir)
                                 for name, run in runs.items()]
        settings = {**machine_info(), "quick": args.quick, "keystrokes": args.keystrokes,
                    "contexts": list(args.contexts), "max_words": MAX_WORDS, "cache": str(args.cache),
                    "runs": {n: str(r) for n, r in runs.items()}, "models": infos}
    finally:
        torch.set_num_threads(before)
    goal_rows = goals(model_rows, http_rows, gate, learning_rows) + length_goals(length_rows)
    print_tables(model_rows, http_rows, goal_rows)
    settings["wall_s"] = round(time.perf_counter() - t_start, 1)
    return {"settings": settings, "model_rows": model_rows, "http_rows": http_rows, "gate": gate,
            "learning": learning_rows, "lengths": length_rows, "goals": goal_rows}


def bench_rows(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The goals of a `measure` payload as rows of `seqlab bench`."""
    out = []
    for g in payload["goals"]:
        op = ">=" if ">=" in g["goal"] else "<="
        bound = g["goal"].split(op, 1)[1].split()[0].rstrip("x")
        out.append(row("latency", f"{g['model']} {g['goal'].split(op)[0].strip()}", g["goal"], g["value"],
                       g["unit"], f"{op} {bound}"))
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    write_json(args.json, measure(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
