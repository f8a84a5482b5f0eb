"""Training speed on a shared machine ("threads" rows): seqlab's default thread count beside a busy process.

Each case is a fresh process (OMP_NUM_THREADS and OMP_WAIT_POLICY unset, as a user starts one) that
trains a family's `small` preset (`seqlab.bench.throughput`'s step) for a few seconds and prints
tokens/s, for attention and for the GRU (whose many small per-step parallel regions react differently):

  quiet 1 thread / 2 threads   torch.set_num_threads(1 or 2), nothing else started
  quiet default                seqlab's default when train.threads is not set: the free cores
                               (`seqlab.training.cpu_threads.ThreadChooser`, as the trainer uses it: chosen at
                               start, re-checked after steps)
  busy default                 the default beside one busy process (a Python loop, `while True: pass`)
  busy 2 threads / 1 thread    fixed counts beside it (2 = torch's own default on 2 cores, the old one)
  busy from mid-run            the busy process starts a few seconds after training did; tokens/s after
                               two re-check periods, with the re-check and without it (the count chosen
                               at start kept)

Goals: beside the busy process the default keeps >= 0.5x of the quiet 1-thread speed, and on a
quiet machine >= 0.9x of the quiet 2-thread speed. "Quiet" means without our busy process: on a machine
shared with others each case's detail says the load before it and the threads the default chose.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from seqlab.bench.harness import row

BUSY = "while True: pass"
FAMILIES = ("attention", "gru")
MIDRUN_DELAY_S = 3.0  # the busy process starts this long after the measured training did
CASES = {  # name -> (busy: "" none, "start" before the child, "mid" during it; threads: N, auto or fixed-auto)
    "quiet 1 thread": ("", "1"),
    "quiet 2 threads": ("", "2"),
    "quiet default": ("", "auto"),
    "busy default": ("start", "auto"),
    "busy 2 threads": ("start", "2"),
    "busy 1 thread": ("start", "1"),
    "busy from mid-run: default": ("mid", "auto"),
    "busy from mid-run: no re-check": ("mid", "auto-once"),
}


def child(family: str, seconds: float, threads: str, skip: float) -> dict[str, Any]:
    """In the measured process: train `family` small for `skip` + `seconds` after a warm-up (announced by a
    READY line, for the parent to time a mid-run busy process); tokens/s over the last `seconds`."""
    import torch

    from seqlab.bench.throughput import family_config, seqlab_step
    from seqlab.training.cpu_threads import EVERY_S, ThreadChooser

    chooser = None
    if threads.startswith("auto"):
        chooser = ThreadChooser(0, recheck=threads == "auto")
        chooser.apply()
    else:
        torch.set_num_threads(int(threads))
    cfg, batch = family_config(family)
    _, step = seqlab_step(cfg, batch)
    for _ in range(2):
        step()
    print("READY", flush=True)
    start = time.perf_counter()
    n, t0 = 0, None
    while (now := time.perf_counter()) - start < skip + seconds:
        if t0 is None and now - start >= skip:
            t0 = now
        step()
        n += t0 is not None
        if chooser is not None:
            chooser.tick()
    rate = n * batch * cfg.block_size / (time.perf_counter() - (t0 or start))
    return {"tokens_per_s": rate, "steps": n, "threads_end": torch.get_num_threads(), "recheck_every_s": EVERY_S,
            "choice": chooser.describe() if chooser is not None else {"threads": int(threads)}}


def measure(family: str, name: str, seconds: float) -> dict[str, Any]:
    """Run one case in a fresh process (and the busy loop beside it where the case says)."""
    from seqlab.training.cpu_threads import EVERY_S

    busy, threads = CASES[name]
    env = dict(os.environ)
    for var in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.pop(var, None)
    skip = MIDRUN_DELAY_S + 2 * EVERY_S + 1.0 if busy == "mid" else 0.0  # the re-check sees a whole busy period
    load = os.getloadavg()[0]
    loop = subprocess.Popen([sys.executable, "-c", BUSY]) if busy == "start" else None
    cmd = [sys.executable, "-m", "seqlab.bench.contention", "--child", family, str(seconds), threads, str(skip)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        if busy == "mid" and ready.startswith("READY"):
            time.sleep(MIDRUN_DELAY_S)
            loop = subprocess.Popen([sys.executable, "-c", BUSY])
        out, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
        if loop is not None:
            loop.kill()
            loop.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"the {family} {name!r} child failed: {err[-2000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    print(f"  {family:<9} {name:<31} {result['tokens_per_s']:8.0f} tokens/s "
          f"({result['choice']['threads']} -> {result['threads_end']} threads, load {load:.1f})", flush=True)
    return {**result, "load_before": load}


def family_rows(family: str, seconds: float) -> list[dict[str, Any]]:
    r = {name: measure(family, name, seconds) for name in CASES}
    rate = {name: v["tokens_per_s"] for name, v in r.items()}
    one, two = rate["quiet 1 thread"], rate["quiet 2 threads"]
    f = family

    def chose(name: str) -> str:  # "quiet" is only without our busy process: the load says what others ran
        return f" (it chose {r[name]['choice']['threads']} threads at load {r[name]['load_before']:.1f})"

    return [
        row("threads", f"{f}: busy: default / quiet 1 thread", "the default (free cores) beside one busy process, "
            "against 1 thread on the machine without it" + chose("busy default"), rate["busy default"] / one, "x",
            ">= 0.5", cases=r),
        row("threads", f"{f}: quiet: default / 2 threads", "the default without the busy process, against 2 "
            "threads (torch's own default on 2 cores)" + chose("quiet default"), rate["quiet default"] / two, "x",
            ">= 0.9", cases=r),
        row("threads", f"{f}: busy: 2 threads / quiet 1 thread", "torch's own default (the old one) beside the "
            "busy process", rate["busy 2 threads"] / one, "x", cases=r),
        row("threads", f"{f}: busy: 1 thread / quiet 1 thread", "1 thread beside the busy process",
            rate["busy 1 thread"] / one, "x", cases=r),
        row("threads", f"{f}: busy from mid-run: default / quiet 1 thread", "the busy process started during "
            "training; the default re-checks the free cores every few seconds", rate["busy from mid-run: default"]
            / one, "x", cases=r),
        row("threads", f"{f}: busy from mid-run: no re-check / quiet 1 thread", "the same with the count chosen "
            "at start kept", rate["busy from mid-run: no re-check"] / one, "x", cases=r),
        row("threads", f"{f}: quiet: 2 threads / 1 thread", "what the second thread buys without the busy process",
            two / one, "x", cases=r),
    ]


def rows(quick: bool) -> list[dict[str, Any]]:
    """The rows for attention and the GRU (quick: attention only, 3 s a case)."""
    seconds = 3.0 if quick else 8.0
    return [r for family in (FAMILIES[:1] if quick else FAMILIES) for r in family_rows(family, seconds)]


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], float(sys.argv[3]), sys.argv[4], float(sys.argv[5]))))
    else:
        raise SystemExit("usage: python -m seqlab.bench.contention --child FAMILY SECONDS THREADS SKIP "
                         "(run by seqlab bench)")
