"""CPU time per MB of the main process of `prepare`, by stage (cProfile on the main process).

With parsing in worker processes, the main process does the rest: it reads the source (for an mbox, the
splitter in mail/files.py), hands chunks to the workers and unpickles their results, checks dedupe keys
and writes the spool, finds threads and splits, and encodes and writes the token files, emails.jsonl and
the contexts. When it is the busier side, its CPU seconds per MB bound the wall rate however many cores
parse. This runs `prepare` on one source (default: bench_prepare.py's mbox of N synthetic messages,
written once into --cache) with the usual workers, measures the main process's CPU seconds
(`time.process_time`, robust to a shared machine) without a profiler, then again under cProfile for
the split by stage and the functions with the most own time.

    python benchmarks/profile_prepare_main.py [--source PATH | --messages N] [--workers W] [--top K] [--repeat R]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_prepare import corpus_bytes, write_corpus  # noqa: E402

from seqlab.data.prepare.options import PrepareConfig  # noqa: E402
from seqlab.data.prepare.pipeline import prepare  # noqa: E402

# Stages of the main process: a function of that file whose cumulative time is the stage.
STAGES = {
    "mbox splitter": ("mbox.py", "split_mbox"),
    "results from workers": ("workers.py", "parse_stream"),
    "  dedupe + spool (the loop body)": ("dedupe.py", "check_keys"),
    "thread + split": ("prepare.py", "_split_threads"),
    "encode + write (token files, emails.jsonl)": ("encode.py", "encode_all"),
    "  encode_texts": ("encode.py", "encode_texts"),
    "  spool read back": ("spool.py", "iter_spool"),
    "contexts (ctx files)": ("contexts.py", "write_contexts"),
    "whole prepare": ("prepare.py", "prepare"),
}


def run_once(source: Path, workers: int | None, profiler: cProfile.Profile | None) -> float:
    """Main-process CPU seconds of one `prepare` of `source` (into a temporary folder)."""
    out = Path(tempfile.mkdtemp(prefix="profile-main-"))
    try:
        t0 = time.process_time()
        if profiler is not None:
            profiler.enable()
        prepare(PrepareConfig(str(source)), out / "data", workers=workers, progress=False)
        if profiler is not None:
            profiler.disable()
        return time.process_time() - t0
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--source", type=Path, default=None, help="mail to prepare (default: the synthetic mbox)")
    p.add_argument("--messages", type=int, default=30_000, help="size of the synthetic mbox")
    p.add_argument("--cache", type=Path, default=Path("out/bench_prepare_cache"), help="corpus cache folder")
    p.add_argument("--workers", type=int, default=None, help="parsing processes (default: the CPUs available)")
    p.add_argument("--top", type=int, default=20, help="functions listed by own time")
    p.add_argument("--repeat", type=int, default=2, help="unprofiled runs; the least CPU counts")
    args = p.parse_args(argv)
    source = args.source or write_corpus(args.cache, [args.messages], 0)[f"mbox-{args.messages}"]
    mb = corpus_bytes(source) / 1e6
    cpu = min(run_once(source, args.workers, None) for _ in range(args.repeat))
    print(f"{source}: {mb:.1f} MB; main process {cpu:.2f} CPU s, {cpu / mb:.4f} CPU s/MB "
          f"({mb / cpu:.1f} MB per main CPU second)")
    prof = cProfile.Profile()
    run_once(source, args.workers, prof)
    st = pstats.Stats(prof)
    total = sum(v[3] for k, v in st.stats.items() if k[0].endswith("prepare.py") and k[2] == "prepare")
    print(f"\nstages (cumulative seconds under cProfile, whole prepare {total:.2f} s)")
    for name, (file, func) in STAGES.items():
        cum = sum(v[3] for k, v in st.stats.items() if k[0].endswith(file) and k[2] == func)
        print(f"  {name:<44} {cum:7.3f} s  {100 * cum / max(total, 1e-9):5.1f}%")
    print()
    st.sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
