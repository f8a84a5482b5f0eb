"""Training speed on a shared machine ("threads" rows): the default thread policy beside a busy process.

Each case is a fresh process (the OpenMP wait policy is read once, when torch loads) that trains the
`small` attention preset (`seqlab.bench.throughput`'s step) for a few seconds and prints tokens/s:

  quiet 1 thread        train.threads=1, nothing else started
  quiet default         seqlab's default: torch's thread count, libgomp's own wait policy (spinning a while)
  quiet passive         the same threads with OMP_WAIT_POLICY=PASSIVE (idle threads sleep), for a user to set
  busy default          the default beside one busy process (a Python loop, `while True: pass`)
  busy passive          passive beside it
  busy 1 thread         1 thread beside it

Goals: beside the busy process the default keeps >= 0.5x of the quiet 1-thread speed; the passive rows say
what setting OMP_WAIT_POLICY=PASSIVE buys there and costs on a quiet machine (for attention; it halved GRU
training, whose per-step parallel regions each pay a wake-up, so seqlab does not set it). "Quiet" means
without our busy process: on a machine shared with others the rows say what the load was.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from seqlab.bench.common import row

BUSY = "while True: pass"
CASES = {  # name -> (busy process?, train threads (0 = default), OMP_WAIT_POLICY: None = unset)
    "quiet 1 thread": (False, 1, None),
    "quiet default": (False, 0, None),
    "quiet passive": (False, 0, "PASSIVE"),
    "busy default": (True, 0, None),
    "busy passive": (True, 0, "PASSIVE"),
    "busy 1 thread": (True, 1, None),
}


def child(seconds: float, threads: int) -> dict[str, float]:
    """In the measured process: train `small` attention for `seconds` after a warm-up; tokens/s."""
    import torch

    from seqlab.bench.throughput import family_config, seqlab_step

    if threads:
        torch.set_num_threads(threads)
    cfg, batch = family_config("attention")
    _, step = seqlab_step(cfg, batch)
    for _ in range(2):
        step()
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        step()
        n += 1
    return {"tokens_per_s": n * batch * cfg.block_size / (time.perf_counter() - t0), "steps": n,
            "threads": torch.get_num_threads()}


def measure(name: str, seconds: float) -> dict[str, Any]:
    busy, threads, policy = CASES[name]
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    env.pop("OMP_NUM_THREADS", None)
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    loop = subprocess.Popen([sys.executable, "-c", BUSY]) if busy else None
    try:
        load = os.getloadavg()[0]
        cmd = [sys.executable, "-m", "seqlab.bench.contention", "--child", str(seconds), str(threads)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    finally:
        if loop is not None:
            loop.kill()
            loop.wait()
    if done.returncode != 0:
        raise RuntimeError(f"the {name!r} child failed: {done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"  {name:<18} {result['tokens_per_s']:8.0f} tokens/s ({result['threads']} threads, load {load:.1f})",
          flush=True)
    return {**result, "load_before": load}


def rows(quick: bool) -> list[dict[str, Any]]:
    seconds = 3.0 if quick else 8.0
    r = {name: measure(name, seconds) for name in CASES}
    rate = {name: v["tokens_per_s"] for name, v in r.items()}
    return [
        row("threads", "busy: default / quiet 1 thread", "default threads beside one busy process, against 1 "
            "thread on the machine without it", rate["busy default"] / rate["quiet 1 thread"], "x", ">= 0.5",
            cases=r),
        row("threads", "busy: passive / quiet 1 thread", "the same with OMP_WAIT_POLICY=PASSIVE",
            rate["busy passive"] / rate["quiet 1 thread"], "x", cases=r),
        row("threads", "busy: 1 thread / quiet 1 thread", "1 thread beside the busy process",
            rate["busy 1 thread"] / rate["quiet 1 thread"], "x", cases=r),
        row("threads", "quiet: passive / default", "what OMP_WAIT_POLICY=PASSIVE costs without the busy process",
            rate["quiet passive"] / rate["quiet default"], "x", cases=r),
        row("threads", "quiet: default / 1 thread", "what the second thread buys without the busy process",
            rate["quiet default"] / rate["quiet 1 thread"], "x", cases=r),
    ]


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(json.dumps(child(float(sys.argv[2]), int(sys.argv[3]))))
    else:
        raise SystemExit("usage: python -m seqlab.bench.contention --child SECONDS THREADS (run by seqlab bench)")
