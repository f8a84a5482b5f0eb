"""Per-keystroke latency of the autocomplete server, kept state against recompute, measured side by side.

Two models of the `small` preset, a GRU (model.mixer=gru model.pos=none) and attention (the preset's RoPE),
each trained briefly on the offline synthetic corpus (a random-weight model never ends a word, so its
decoding would always run to the token budget). Data and runs are cached under --cache (default
out/bench_latency_cache) and reused when present. The text is email bodies from the corpus's test split
(the bodies of consecutive test emails joined by a blank line until long enough), cut to C bytes of
context; then the next K characters are typed one at a time. One torch thread throughout.

Model time, `CompletionEngine` called directly (max_words=3, greedy, no threshold), per keystroke:
  kept       the same session every keystroke (warmed with the context first): only new tokens are encoded
  recompute  session=None: the whole prompt is encoded from scratch
  enc kept / enc scratch   `engine.encoder.encode` alone, with and without the previous keystroke's state:
             the part the kept state saves (the rest is tokenizing and decoding up to 3 words)
The four are timed in alternating order keystroke by keystroke (A B C D, D C B A, ...), so they see the
same machine load. Goals: kept p90 <= 15 ms; kept >= 5x faster than recompute at 1024 bytes (p50 ratio).

End to end: `python -m seqlab serve RUN --port 0 --threads 1` as a child process; per-keystroke
POST /v1/complete with a session over one persistent httpx connection on loopback. The round trip is
compared with the `latency_ms` the server reports for the same request; overhead = round trip - model.
GET /health on the same connection (no model work) shows what the transport alone costs.
Goal: the server adds <= 3 ms at p50.

Prints tables with PASS/MISS per goal and writes JSON (default out/bench_latency.json); in `seqlab bench`
its goals are the "latency" rows.

    python benchmarks/bench_latency.py [--quick] [--cache DIR] [--keystrokes K] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seqlab.bench.common import machine_info, row
from seqlab.bench.results import write_json

CONTEXTS = (64, 256, 1024, 2048)
KEPT_P90_MS = 15.0
SPEEDUP_AT = 1024
SPEEDUP_GOAL = 5.0
OVERHEAD_P50_MS = 3.0
MAX_WORDS = 3
MODELS = {"gru": ["model.mixer=gru", "model.pos=none"], "attention": []}  # attention: the preset's RoPE


# ---------------------------------------------------------------- data and runs, cached


def _seqlab(*args: str) -> None:
    """Run `python -m seqlab ARGS` in a child process; stop the benchmark if it fails."""
    cmd = [sys.executable, "-m", "seqlab", *args]
    print("  $ " + " ".join(cmd[1:]), flush=True)
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise SystemExit(f"`seqlab {args[0]}` failed (exit {done.returncode}):\n{done.stdout[-3000:]}")
    last = done.stdout.strip().splitlines()[-1:] or [""]
    print(f"    {last[0]}", flush=True)


def ensure_data(cache: Path, count: int = 2000) -> Path:
    """cache/data: the offline synthetic corpus (`count` emails) prepared on first use, reused afterwards."""
    cache.mkdir(parents=True, exist_ok=True)
    data = cache / "data"
    if not (data / "meta.json").is_file():
        shutil.rmtree(data, ignore_errors=True)
        _seqlab("prepare", "synthetic", "--out", str(data), "--count", str(count), "--quiet")
    return data


def ensure_runs(cache: Path, quick: bool) -> tuple[Path, dict[str, Path]]:
    """(DATA_DIR, {model name: RUN_DIR}), prepared and trained on first use, reused afterwards.

    A run is trained into NAME.tmp and renamed when `seqlab train` has finished, so an interrupted
    training is started again instead of being measured."""
    data = ensure_data(cache)
    if quick:
        preset, budget = "tiny", ["train.max_steps=200", "train.eval_every=100"]
    else:
        preset, budget = "small", ["train.max_minutes=2"]
    runs = {}
    for name, overrides in MODELS.items():
        run = cache / f"{name}-{preset}"
        if not (run / "manifest.json").is_file():
            tmp = cache / f"{run.name}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            _seqlab("train", str(data), "--out", str(tmp), "--preset", preset, "--quiet", *overrides, *budget)
            shutil.rmtree(run, ignore_errors=True)
            tmp.rename(run)
        runs[name] = run
    return data, runs


def test_text(data: Path, min_chars: int) -> tuple[str, str]:
    """(subject, body): the first test email's subject and the bodies of test emails joined by a blank line."""
    from seqlab.data.store import TokenStore
    from seqlab.data.tokenizer import load_tokenizer

    tok = load_tokenizer(data / "tokenizer.json")
    store = TokenStore(data, "test")
    subject, bodies, size = "", [], 0
    for i in range(store.num_emails):
        text = tok.decode([t for t in store.email(i).tolist() if not tok.is_special(t)])
        head, _, body = text.partition("\n\n")
        subject = subject or head
        bodies.append(body.strip())
        size += len(body) + 2
        if size >= min_chars:
            break
    body = "\n\n".join(bodies)
    if len(body) < min_chars:
        raise SystemExit(f"the test split of {data} holds {len(body)} characters of body, fewer than {min_chars}")
    return subject, body


def cut_bytes(text: str, n: int) -> int:
    """Characters of `text` in its first n UTF-8 bytes (a character cut in two is left out)."""
    return len(text.encode("utf-8")[:n].decode("utf-8", errors="ignore"))


# ---------------------------------------------------------------- statistics


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else float("nan")


def summary(values: list[float]) -> dict[str, float]:
    return {"p50": pct(values, 50), "p90": pct(values, 90), "mean": float(np.mean(values)), "n": len(values)}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return 1000 * (time.perf_counter() - t0), out


# ---------------------------------------------------------------- model time


def bench_model(name: str, run: Path, subject: str, body: str, contexts: tuple[int, ...],
                keystrokes: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of kept vs recompute (and encode-only) per context size for one model."""
    from seqlab.generation.complete import encode_prompt
    from seqlab.runs.load import load_run
    from seqlab.serving.engine import CompletionEngine, prompt_text

    model, tok, _ = load_run(run, "cpu")
    engine = CompletionEngine(model, tok, threshold=0.0)
    info = engine.describe()
    summary_json = json.loads((run / "run.json").read_text()).get("summary", {})
    info.update(steps=summary_json.get("steps"), best_val_loss=summary_json.get("best_val_loss"))

    def ids_of(prefix: str) -> list[int]:
        return encode_prompt(tok, prompt_text(subject, prefix))[0]

    for _ in range(3):  # first calls allocate and warm the caches of the allocator
        engine.complete(body[:200], subject, None, max_words=MAX_WORDS)
    rows = []
    for ctx in contexts:
        n0 = cut_bytes(body, ctx)
        sid = f"bench-{name}-{ctx}"
        engine.complete(body[:n0], subject, sid, max_words=MAX_WORDS)  # the session holds the context
        engine.complete(body[:n0], subject, None, max_words=MAX_WORDS)
        enc_prev, _ = engine.encoder.encode(ids_of(body[:n0]))
        times: dict[str, list[float]] = {"kept": [], "recompute": [], "enc_kept": [], "enc_scratch": []}
        reused, words, same = [], [], 0
        for k in range(1, keystrokes + 1):
            prefix = body[:n0 + k]
            ids = ids_of(prefix)
            results: dict[str, Any] = {}
            steps: dict[str, Callable[[], Any]] = {
                "kept": lambda p=prefix, s=sid: engine.complete(p, subject, s, max_words=MAX_WORDS),
                "recompute": lambda p=prefix: engine.complete(p, subject, None, max_words=MAX_WORDS),
                "enc_kept": lambda i=ids, e=enc_prev: engine.encoder.encode(i, e),
                "enc_scratch": lambda i=ids: engine.encoder.encode(i),
            }
            order = list(steps) if k % 2 else list(reversed(steps))
            for key in order:
                ms, results[key] = timed(steps[key])
                times[key].append(ms)
            enc_prev = results["enc_kept"][0]
            reused.append(results["kept"].reused_tokens)
            words.append(results["kept"].words)
            same += results["kept"].text == results["recompute"].text
        kept, rec = summary(times["kept"]), summary(times["recompute"])
        row = {"model": name, "context_bytes": ctx, "prompt_tokens": len(ids_of(body[:n0])),
               "keystrokes": keystrokes, **{k: summary(v) for k, v in times.items()},
               "speedup_p50": rec["p50"] / kept["p50"], "speedup_p90": rec["p90"] / kept["p90"],
               "reused_tokens_p50": pct(reused, 50), "words_mean": float(np.mean(words)),
               "same_suggestion": same, "kept_p90_pass": kept["p90"] <= KEPT_P90_MS}
        rows.append(row)
        print(f"  {name:<9} {ctx:>5} B: kept p50 {kept['p50']:6.2f} ms, recompute p50 {rec['p50']:7.2f} ms",
              flush=True)
    return rows, info


# ---------------------------------------------------------------- end to end over HTTP


def start_server(run: Path, log_dir: Path) -> tuple[subprocess.Popen[str], int]:
    """`python -m seqlab serve RUN --port 0` as a child; (process, port), once /health answers 200."""
    import httpx

    cmd = [sys.executable, "-m", "seqlab", "serve", str(run), "--port", "0", "--threads", "1",
           "--min-confidence", "0", "--log", str(log_dir)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str] = queue.Queue()

    def drain() -> None:  # keep reading so the child never blocks on a full pipe
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + 120
    port = None
    seen = []
    while port is None:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            line = ""
        seen.append(line)
        m = re.search(r"http://[^:/]+:(\d+)/", line)
        if m:
            port = int(m.group(1))
        elif proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("the server did not start:\n" + "".join(seen))
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        while True:
            try:
                if client.get("/health").status_code == 200:
                    return proc, port
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit("the server never answered /health with 200")
            time.sleep(0.2)


def bench_http(name: str, run: Path, subject: str, body: str, contexts: tuple[int, ...], keystrokes: int,
               log_dir: Path) -> list[dict[str, Any]]:
    """Rows of HTTP round trip vs the server's latency_ms per context size for one model."""
    import httpx

    proc, port = start_server(run, log_dir)
    rows = []
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            def post(prefix: str, session: str) -> tuple[float, dict[str, Any]]:
                ms, r = timed(lambda: client.post("/v1/complete", json={
                    "prefix": prefix, "subject": subject, "session": session, "max_words": MAX_WORDS}))
                r.raise_for_status()
                return ms, r.json()

            for _ in range(3):
                post(body[:200], "warm-" + uuid.uuid4().hex)
            health = [timed(lambda: client.get("/health").raise_for_status())[0] for _ in range(keystrokes)]
            for ctx in contexts:
                n0 = cut_bytes(body, ctx)
                sid = uuid.uuid4().hex
                post(body[:n0], sid)
                rtt, model, over = [], [], []
                for k in range(1, keystrokes + 1):
                    ms, answer = post(body[:n0 + k], sid)
                    rtt.append(ms)
                    model.append(answer["latency_ms"])
                    over.append(ms - answer["latency_ms"])
                o = summary(over)
                rows.append({"model": name, "context_bytes": ctx, "keystrokes": keystrokes,
                             "round_trip": summary(rtt), "server_model": summary(model), "overhead": o,
                             "health_round_trip": summary(health),
                             "overhead_pass": o["p50"] <= OVERHEAD_P50_MS})
                print(f"  {name:<9} {ctx:>5} B: round trip p50 {pct(rtt, 50):6.2f} ms, model p50 "
                      f"{pct(model, 50):6.2f} ms", flush=True)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return rows


# ---------------------------------------------------------------- report


def goals(model_rows: list[dict[str, Any]], http_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for name in MODELS:
        mine = [r for r in model_rows if r["model"] == name]
        worst = max(r["kept"]["p90"] for r in mine)
        out.append({"model": name, "goal": f"kept p90 <= {KEPT_P90_MS:g} ms (worst context)", "value": worst,
                    "unit": "ms", "pass": worst <= KEPT_P90_MS})
        at = [r for r in mine if r["context_bytes"] == SPEEDUP_AT]
        if at:
            s = at[0]["speedup_p50"]
            out.append({"model": name, "goal": f"recompute/kept p50 >= {SPEEDUP_GOAL:g}x at {SPEEDUP_AT} B",
                        "value": s, "unit": "x", "pass": s >= SPEEDUP_GOAL})
        over = [r["overhead"]["p50"] for r in http_rows if r["model"] == name]
        if over:
            out.append({"model": name, "goal": f"server overhead p50 <= {OVERHEAD_P50_MS:g} ms (worst context)",
                        "value": max(over), "unit": "ms", "pass": max(over) <= OVERHEAD_P50_MS})
    return out


def print_tables(model_rows: list[dict[str, Any]], http_rows: list[dict[str, Any]],
                 goal_rows: list[dict[str, Any]]) -> None:
    print("\nmodel time per keystroke, ms (CompletionEngine, max_words=3, greedy)")
    print(f"{'model':<9} {'ctx B':>5} {'tok':>5} | {'kept p50':>8} {'p90':>6} | {'recomp p50':>10} {'p90':>7} | "
          f"{'speedup p50':>11} {'p90':>6} | {'enc kept p50':>12} {'enc scratch p50':>15} | {'words':>5} "
          f"{'same':>5}  kept p90<={KEPT_P90_MS:g}")
    for r in model_rows:
        print(f"{r['model']:<9} {r['context_bytes']:>5} {r['prompt_tokens']:>5} | {r['kept']['p50']:8.2f} "
              f"{r['kept']['p90']:6.2f} | {r['recompute']['p50']:10.2f} {r['recompute']['p90']:7.2f} | "
              f"{r['speedup_p50']:10.1f}x {r['speedup_p90']:5.1f}x | {r['enc_kept']['p50']:12.2f} "
              f"{r['enc_scratch']['p50']:15.2f} | {r['words_mean']:5.1f} {r['same_suggestion']:>2}/{r['keystrokes']:<2}"
              f"  {'PASS' if r['kept_p90_pass'] else 'MISS'}")
    if http_rows:
        print("\nend to end over HTTP on loopback, ms (POST /v1/complete with a session)")
        print(f"{'model':<9} {'ctx B':>5} | {'round trip p50':>14} {'p90':>6} | {'server model p50':>16} {'p90':>6} | "
              f"{'overhead p50':>12} {'p90':>6} | {'GET /health p50':>15}  overhead p50<={OVERHEAD_P50_MS:g}")
        for r in http_rows:
            print(f"{r['model']:<9} {r['context_bytes']:>5} | {r['round_trip']['p50']:14.2f} "
                  f"{r['round_trip']['p90']:6.2f} | {r['server_model']['p50']:16.2f} {r['server_model']['p90']:6.2f}"
                  f" | {r['overhead']['p50']:12.2f} {r['overhead']['p90']:6.2f} | "
                  f"{r['health_round_trip']['p50']:15.2f}  "
                  f"{'PASS' if r['overhead_pass'] else 'MISS'}")
    print("\ngoals")
    for g in goal_rows:
        print(f"{g['model']:<9} {g['goal']:<46} {g['value']:8.2f} {g['unit']:<2}  {'PASS' if g['pass'] else 'MISS'}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", type=Path, default=Path("out/bench_latency.json"), help="where to write the results")
    p.add_argument("--cache", type=Path, default=Path("out/bench_latency_cache"),
                   help="data and trained runs, reused when present")
    p.add_argument("--keystrokes", type=int, default=40, help="characters typed after each context")
    p.add_argument("--contexts", default=",".join(map(str, CONTEXTS)), help="context sizes in bytes")
    p.add_argument("--no-http", action="store_true", help="skip the end-to-end HTTP part")
    p.add_argument("--quick", action="store_true",
                   help="tiny preset trained 200 steps, contexts 64 and 1024, 8 keystrokes: a smoke run")
    args = p.parse_args(argv)
    args.contexts = tuple(int(c) for c in args.contexts.split(","))
    if args.quick:
        args.keystrokes = min(args.keystrokes, 8)
        args.contexts = (64, 1024)
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
        http_rows: list[dict[str, Any]] = []
        if not args.no_http:
            print("HTTP ...", flush=True)
            log_dir = args.cache / "serve-log"
            shutil.rmtree(log_dir, ignore_errors=True)
            for name, run in runs.items():
                http_rows += bench_http(name, run, subject, body, args.contexts, args.keystrokes, log_dir)
        settings = {**machine_info(), "quick": args.quick, "keystrokes": args.keystrokes,
                    "contexts": list(args.contexts), "max_words": MAX_WORDS, "cache": str(args.cache),
                    "runs": {n: str(r) for n, r in runs.items()}, "models": infos}
    finally:
        torch.set_num_threads(before)
    goal_rows = goals(model_rows, http_rows)
    print_tables(model_rows, http_rows, goal_rows)
    settings["wall_s"] = round(time.perf_counter() - t_start, 1)
    return {"settings": settings, "model_rows": model_rows, "http_rows": http_rows, "goals": goal_rows}


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
