"""`seqlab bench`: every benchmark side by side, written to bench.json and bench.md (`seqlab.bench.suite`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from seqlab.bench import SECTIONS


def _sections(text: str) -> tuple[str, ...]:
    names = tuple(s.strip() for s in text.split(",") if s.strip())
    bad = [s for s in names if s not in SECTIONS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"sections are {', '.join(SECTIONS)}, not {text!r}")
    return names


def add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run every benchmark; write bench.json and bench.md",
                       description="Run every benchmark in one process tree and write OUT/bench.json and a "
                                   "Markdown table OUT/bench.md: each row a ratio measured side by side in this "
                                   "run, its goal and PASS/MISS, headed by the machine.")
    p.add_argument("--quick", action="store_true", help="small sizes and few repeats (a few minutes)")
    p.add_argument("--out", type=Path, default=Path("out/bench"), help="folder for bench.json, bench.md and caches")
    p.add_argument("--only", type=_sections, default=SECTIONS, metavar="SECTION[,SECTION]",
                   help=f"run only these sections: {', '.join(SECTIONS)}")


def run_bench(args: argparse.Namespace) -> int:
    from seqlab.bench.suite import run_bench as run

    run(args.out, quick=args.quick, only=args.only)
    return 0
