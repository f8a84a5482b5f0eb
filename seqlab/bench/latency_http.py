"""End to end over HTTP on loopback: what the server adds to the model's time.

`python -m seqlab serve RUN --port 0 --threads 1` as a child process; per-keystroke POST /v1/complete with
a session over one persistent httpx connection on loopback. The round trip is compared with the
`latency_ms` the server reports for the same request; overhead = round trip - model. GET /health on the
same connection (no model work) shows what the transport alone costs.
"""

from __future__ import annotations

import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from seqlab.bench.latency_model import pct, summary, timed
from seqlab.bench.latency_runs import MAX_WORDS, OVERHEAD_P50_MS, cut_bytes


def start_server(run: Path, log_dir: Path) -> tuple[subprocess.Popen[str], int, str]:
    """`python -m seqlab serve RUN --port 0` as a child; (process, port, token), once /health answers 200."""
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
        m = re.search(r"http://[^:/]+:(\d+)/\?token=([A-Za-z0-9_-]+)", line)
        if m:
            port, token = int(m.group(1)), m.group(2)
        elif proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("the server did not start:\n" + "".join(seen))
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        while True:
            try:
                if client.get("/health").status_code == 200:
                    return proc, port, token
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

    proc, port, token = start_server(run, log_dir)
    rows = []
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                          headers={"Authorization": f"Bearer {token}"}) as client:
            def post(prefix: str, session: str | None) -> tuple[float, dict[str, Any]]:
                ms, r = timed(lambda: client.post("/v1/complete", json={
                    "prefix": prefix, "subject": subject, "session": session, "max_words": MAX_WORDS}))
                r.raise_for_status()
                return ms, r.json()

            for _ in range(3):
                post(body[:200], None)
            health = [timed(lambda: client.get("/health").raise_for_status())[0] for _ in range(keystrokes)]
            for ctx in contexts:
                n0 = cut_bytes(body, ctx)
                sid = post(body[:n0], None)[1]["session"]  # the server names the session
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
