"""The `seqlab` command line: the table of subcommands, the parser, and `main` (user errors -> exit code 2).

Each command group has its own module (`data`, `training`, `trained`, `studies`, ...), and each subcommand there is
a pair `add_<name>(subparsers)` / `run_<name>(args)`. Heavy modules are imported inside the `run_` functions
so that `seqlab --help` is instant and nothing runs at import.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Sequence

from seqlab.cli import bench, data, serving, studies, trained, training
from seqlab.errors import UserError
from seqlab.private_files import private_umask, warnings_as_lines
from seqlab.version import __version__

COMMANDS: dict[str, tuple[Callable[[argparse._SubParsersAction], None], Callable[[argparse.Namespace], int]]] = {
    "prepare": (data.add_prepare, data.run_prepare),
    "train": (training.add_train, training.run_train),
    "eval": (trained.add_eval, trained.run_eval),
    "calibrate": (trained.add_calibrate, trained.run_calibrate),
    "complete": (trained.add_complete, trained.run_complete),
    "tradeoff": (trained.add_tradeoff, trained.run_tradeoff),
    "phrases": (trained.add_phrases, trained.run_phrases),
    "attention": (studies.add_attention, studies.run_attention),
    "inspect": (studies.add_inspect, studies.run_inspect),
    "lesson": (studies.add_lesson, studies.run_lesson),
    "compare": (studies.add_compare, studies.run_compare),
    "demo": (studies.add_demo, studies.run_demo),
    "serve": (serving.add_serve, serving.run_serve),
    "forget": (serving.add_forget, serving.run_forget),
    "bench": (bench.add_bench, bench.run_bench),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="seqlab",
        description="Train, compare and inspect next-token language models (RNN, GRU, minGRU, attention) on email.",
    )
    parser.add_argument("--version", action="version", version=f"seqlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add, _ in COMMANDS.values():
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    # key=value overrides may come after options (`train DATA --out RUN --preset tiny model.mixer=gru`),
    # which argparse's positional matching leaves unparsed: collect them here.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if not hasattr(args, "overrides") or any(a.startswith("-") or "=" not in a for a in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    if args.command is None:
        parser.print_help()
        return 2
    try:
        # Everything a command writes is mail or derived from it: readable by this user only, whatever the
        # umask it was started with; a folder it opens that others can read is one warning line.
        with private_umask(), warnings_as_lines():
            return COMMANDS[args.command][1](args)
    except UserError as exc:
        print(f"seqlab: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("seqlab: interrupted", file=sys.stderr)
        return 130
    finally:
        if argv is None:  # the program itself (console script, python -m seqlab), which returns only to exit
            # Its output is complete (or it said "interrupted"), but the interpreter's shutdown takes about
            # half a second with torch loaded, and Python puts SIGINT back to its default action early in
            # it: a Ctrl-C there killed a finished command (exit -2, no message). Nothing is left to stop.
            signal.signal(signal.SIGINT, signal.SIG_IGN)


if __name__ == "__main__":
    raise SystemExit(main())
