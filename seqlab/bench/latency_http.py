"""End to end over HTTP on loopback: what the server adds to the model's time.

`python -m seqlab serve RUN --port 0 --threads 1` as a child process; per-keystroke POST /v1/complete with
the token and the server's session over one persistent connection on loopback. The round trip is compared
with the `latency_ms` the server reports for the same request; overhead = round trip - model. GET /health
on the same connection (no model work) shows what the transport alone costs.

The client is the standard library's `http.client`, the leanest one at hand: a richer client (httpx) adds
a cost of its own per request that the server is not to blame for (a browser's fetch has its own cost
too). `gate_cost` times the access gate alone, in-process, against the same request without it.
"""

from __future__ import annotations

import json
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from seqlab.bench.latency_model import pct, summary, timed
from seqlab.bench.latency_runs import MAX_WORDS, OVERHEAD_P50_MS, cut_bytes


def start_server(run: Path, log_dir: Path, *extra: str) -> tuple[subprocess.Popen[str], int, str]:
    """`python -m seqlab serve RUN --port 0 EXTRA` as a child; (process, port, token), once /health answers 200."""
    import httpx

    cmd = [sys.executable, "-m", "seqlab", "serve", str(run), "--port", "0", "--threads", "1",
           "--min-confidence", "0", "--log", str(log_dir), *extra]
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
        m = re.search(r"http://[^:/]+:(\d+)/\?(?:code|token)=", line)
        if m:  # the printed link is one-time; the token for scripts is in server.json, written before it
            port = int(m.group(1))
            token = json.loads((run / "serve" / "server.json").read_text(encoding="utf-8"))["token"]
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


class Client:
    """One persistent loopback connection to a `seqlab serve` child, speaking with its token."""

    def __init__(self, port: int, token: str) -> None:
        import http.client

        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        self.conn.request(method, path, json.dumps(payload) if payload is not None else None, self.headers)
        res = self.conn.getresponse()
        data = json.loads(res.read())
        if res.status != 200:
            raise SystemExit(f"{method} {path} answered {res.status}: {data}")
        return data


@contextmanager
def serving(run: Path, log_dir: Path, *extra: str) -> Iterator[Client]:
    """A `seqlab serve RUN` child (start_server) and a Client of it; the child is stopped afterwards."""
    proc, port, token = start_server(run, log_dir, *extra)
    client = Client(port, token)
    try:
        yield client
    finally:
        client.conn.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def bench_http(name: str, run: Path, subject: str, body: str, contexts: tuple[int, ...], keystrokes: int,
               log_dir: Path) -> list[dict[str, Any]]:
    """Rows of HTTP round trip vs the server's latency_ms per context size for one model."""
    rows = []
    with serving(run, log_dir) as client:
        def post(prefix: str, session: str | None) -> tuple[float, dict[str, Any]]:
            return timed(lambda: client.call("POST", "/v1/complete", {
                "prefix": prefix, "subject": subject, "session": session, "max_words": MAX_WORDS}))

        for _ in range(3):
            post(body[:200], None)
        health = [timed(lambda: client.call("GET", "/health"))[0] for _ in range(keystrokes)]
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
    return rows


def bench_learning(name: str, run: Path, subject: str, body: str, sent: list[tuple[str, str]], bursts: int,
                   log_dir: Path) -> dict[str, Any]:
    """Keystrokes while the server learns (`serve --learn`) against the same keystrokes without it.

    A person types in bursts: `bursts` times, one word's keystrokes in quick succession, then a pause just
    longer than the learner's quiet time, in which it starts a step on the `sent` emails it was given; the
    next burst's keystrokes arrive while that step runs. Both servers serve a scratch copy of `run` (what is
    learned never reaches the benchmark's cached run), one after the other, with the same keystrokes."""
    from seqlab.serving.learner import LearnSettings

    pause = LearnSettings().idle_s + 0.3
    out: dict[str, Any] = {"model": name, "bursts": bursts, "sent": len(sent), "pause_s": pause}
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "run"
        shutil.copytree(run, copy, ignore=shutil.ignore_patterns("serve", "personal"))
        for mode, extra in (("plain", ()), ("learning", ("--learn",))):
            with serving(copy, log_dir, *extra) as client:
                for subj, text in sent if extra else []:
                    client.call("POST", "/v1/sent", {"subject": subj, "body": text})
                sid, rtt, pos = None, [], 200
                for _ in range(bursts):
                    time.sleep(pause)
                    for _ in range(6):  # one word's keystrokes, about 12 a second
                        pos += 1
                        ms, answer = timed(lambda p=pos, s=sid: client.call("POST", "/v1/complete", {
                            "prefix": body[:p], "subject": subject, "session": s, "max_words": MAX_WORDS}))
                        sid = answer["session"]
                        rtt.append(ms)
                        time.sleep(0.08)
                learned = client.call("GET", "/health").get("learning") or {}
            out[mode] = {"round_trip": summary(rtt), "learner_steps": learned.get("steps", 0)}
            print(f"  {name:<9} {mode:<8}: keystroke p90 {pct(rtt, 90):6.2f} ms over {len(rtt)} keystrokes"
                  + (f", {learned.get('steps', 0)} learning steps meanwhile" if extra else ""), flush=True)
    out["p90_ratio"] = out["learning"]["round_trip"]["p90"] / max(1e-9, out["plain"]["round_trip"]["p90"])
    return out


def gate_cost(rounds: int = 15, calls: int = 400) -> dict[str, Any]:
    """Microseconds one keystroke's request spends in the access gate (`seqlab.serving.access`): the same
    POST /v1/complete, with the headers a browser sends, through `AccessGuard` and straight to the same
    no-op app, timed alternately in one event loop (median over `rounds` of `calls` each)."""
    import asyncio

    from seqlab.serving.access import AccessGuard, AccessPolicy
    from seqlab.serving.credentials import PairingStore, new_token

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"{}"})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Any) -> None:
        return None

    token = new_token()
    with tempfile.TemporaryDirectory() as folder:
        guard = AccessGuard(app, AccessPolicy(token, "127.0.0.1", 8000, PairingStore(Path(folder) / "paired.json")))
        headers = [(b"host", b"127.0.0.1:8000"), (b"connection", b"keep-alive"), (b"content-length", b"120"),
                   (b"sec-ch-ua-platform", b'"Linux"'), (b"authorization", f"Bearer {token}".encode()),
                   (b"user-agent", b"Mozilla/5.0 (X11; Linux x86_64) Chrome/156.0.0.0 Safari/537.36"),
                   (b"content-type", b"application/json"), (b"accept", b"*/*"),
                   (b"origin", b"http://127.0.0.1:8000"), (b"sec-fetch-site", b"same-origin"),
                   (b"sec-fetch-mode", b"cors"), (b"referer", b"http://127.0.0.1:8000/"),
                   (b"accept-encoding", b"gzip, deflate, br, zstd"), (b"accept-language", b"en-US,en;q=0.9")]

        def scope() -> dict[str, Any]:
            return {"type": "http", "method": "POST", "path": "/v1/complete", "query_string": b"",
                    "headers": headers}

        async def timed_calls(target: Any) -> float:
            t0 = time.perf_counter()
            for _ in range(calls):
                await target(scope(), receive, send)
            return (time.perf_counter() - t0) / calls * 1e6

        async def measure() -> tuple[list[float], list[float]]:
            gated, bare = [], []
            for _ in range(rounds):
                gated.append(await timed_calls(guard))
                bare.append(await timed_calls(app))
            return gated, bare

        gated, bare = asyncio.run(measure())
    g, b = float(np.median(gated)), float(np.median(bare))
    return {"gated_us": g, "bare_us": b, "gate_us": g - b, "rounds": rounds, "calls": calls}
