"""The `seqlab` command line: argparse subcommands, user errors as exit code 2 with one sentence.

Each subcommand is a pair of functions, `_add_<name>(subparsers)` and `_run_<name>(args)`. Heavy modules
are imported inside the `_run_` functions so that `seqlab --help` is instant and nothing runs at import.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Sequence

from seqlab import __version__, cli_reports
from seqlab.cli_types import positive_int, split_fractions, unit_float
from seqlab.errors import UserError


# ---------------------------------------------------------------- prepare


def _add_prepare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prepare",
        help="read a mail source, clean, dedupe, split by thread, fit a tokenizer, write DATA_DIR",
        description="Read mail from SOURCE (an mbox file, a Maildir, a folder of message files, an Enron-style "
        "tree, a CSV with a raw-message column, one message file, or the named corpora 'spamassassin' and "
        "'synthetic'), split it by thread and write token files to DATA_DIR.",
    )
    p.add_argument("source", help="path to mail, or 'spamassassin' / 'synthetic'")
    p.add_argument("--out", required=True, type=Path, help="DATA_DIR to write")
    p.add_argument("--tokenizer", choices=("byte", "bpe"), default="byte")
    p.add_argument("--vocab-size", type=positive_int, default=4096, help="BPE vocabulary size (default 4096)")
    p.add_argument("--split", type=split_fractions, default=(0.9, 0.05, 0.05), help="train,val,test fractions")
    p.add_argument("--seed", type=int, default=0, help="seed of the thread-to-split hash (default 0)")
    p.add_argument("--keep-quotes", action="store_true", help="keep quoted replies and forwarded text")
    p.add_argument("--keep-signatures", action="store_true", help="keep signatures after '-- '")
    p.add_argument("--mask-pii", action="store_true", help="replace email addresses, URLs and phone numbers")
    p.add_argument("--limit", type=positive_int, default=None, help="read at most N messages")
    p.add_argument("--count", type=positive_int, default=2000, help="emails to generate for 'synthetic'")
    p.add_argument("--groups", default=None, help="spamassassin groups, comma-separated (default: the ham groups)")
    p.add_argument("--cache-dir", type=Path, default=None, help="download cache (default ~/.cache/seqlab)")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="processes that parse mail (default: one per CPU; 1 parses in-process)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _run_prepare(args: argparse.Namespace) -> int:
    from seqlab.data.prepare import format_report, prepare

    meta = prepare(
        args.source,
        args.out,
        tokenizer=args.tokenizer,
        vocab_size=args.vocab_size,
        split=args.split,
        seed=args.seed,
        keep_quotes=args.keep_quotes,
        keep_signatures=args.keep_signatures,
        mask_pii=args.mask_pii,
        limit=args.limit,
        count=args.count,
        groups=args.groups.split(",") if args.groups else None,
        cache_dir=args.cache_dir,
        workers=args.workers,
        progress=not args.quiet,
    )
    print(format_report(meta))
    print(f"wrote {args.out}")
    return 0


# ---------------------------------------------------------------- train


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a model on a prepared DATA_DIR",
        description="Train a model on DATA_DIR and write RUN_DIR. Any config field can be set as "
        "section.field=value, e.g. model.mixer=gru model.pos=none train.lr=3e-3 train.max_steps=500.",
    )
    p.add_argument("data_dir", type=Path, help="a folder written by `seqlab prepare`")
    p.add_argument("--out", required=True, type=Path, help="RUN_DIR to write")
    p.add_argument("--preset", default="small", help="tiny | small | base (default small)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in RUN_DIR from its last good checkpoint, with its saved config")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")


def _run_train(args: argparse.Namespace) -> int:
    from seqlab.config import get_preset
    from seqlab.train import train

    try:
        base = None if args.resume else get_preset(args.preset)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    summary = train(args.data_dir, args.out, base, resume=args.resume, overrides=args.overrides,
                    progress=not args.quiet)
    print(f"{summary['stopped']}: {summary['steps']} steps, best val loss {summary['best_val_loss']:.4f} "
          f"at step {summary['best_step']}, {summary['tokens_per_s']:.0f} tokens/s; wrote {args.out}")
    return 0


# ---------------------------------------------------------------- eval and complete


def _add_eval(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="loss, perplexity, bits per byte, compressor baselines and ExactMatch",
                       description="Evaluate RUN_DIR's best checkpoint over every window of a split: loss per "
                       "token, perplexity, bits per byte of the original text beside gzip/bz2/xz on the same "
                       "text, and Smart-Compose-style ExactMatch@N with coverage.")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--data", type=Path, default=None, help="DATA_DIR (default: the one the run trained on)")
    p.add_argument("--split", choices=("val", "test"), default="val")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--threshold", type=unit_float, default=0.0,
                   help="propose a completion only when the first word's probability is at least this")
    p.add_argument("--coverage", type=unit_float, default=None,
                   help="also report ExactMatch at the threshold that gives this coverage")
    p.add_argument("--completion-emails", type=positive_int, default=100)
    p.add_argument("--device", default="auto")


def _run_eval(args: argparse.Namespace) -> int:
    import json

    from seqlab.evaluate import evaluate_run, format_eval

    result = evaluate_run(args.run_dir, args.data, args.split, args.device, completion_threshold=args.threshold,
                          target_coverage=args.coverage or None, completion_emails=args.completion_emails)
    print(json.dumps(result, sort_keys=True) if args.json else format_eval(result))
    return 0


def _add_complete(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("complete", help="suggest how an email goes on",
                       description="Print the model's suggestion for the next words of PROMPT (greedy by "
                       "default). With --threshold, print nothing when the model is unsure.")
    p.add_argument("run_dir", type=Path)
    p.add_argument("prompt")
    p.add_argument("--max-words", type=positive_int, default=5)
    p.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default)")
    p.add_argument("--top-k", type=positive_int, default=None)
    p.add_argument("--top-p", type=unit_float, default=None)
    p.add_argument("--beam", type=positive_int, default=1)
    p.add_argument("--seed", type=int, default=None, help="seed for sampling (reproducible)")
    p.add_argument("--threshold", type=unit_float, default=None, help="minimum confidence to suggest anything")
    p.add_argument("--show-confidence", action="store_true")
    p.add_argument("--device", default="auto")


def _run_complete(args: argparse.Namespace) -> int:
    from seqlab.complete import complete
    from seqlab.runs import load_run

    if args.temperature < 0:
        raise UserError(f"--temperature must be 0 or more, not {args.temperature}")
    model, tok, _ = load_run(args.run_dir, args.device)
    c = complete(model, tok, args.prompt, max_words=args.max_words, temperature=args.temperature,
                 top_k=args.top_k, top_p=args.top_p, beam=args.beam, seed=args.seed, threshold=args.threshold)
    print(f"{c.text}\t(confidence {c.confidence:.3f})" if args.show_confidence else c.text)
    return 0


# ---------------------------------------------------------------- entry point

COMMANDS: dict[str, tuple[Callable[[argparse._SubParsersAction], None], Callable[[argparse.Namespace], int]]] = {
    "prepare": (_add_prepare, _run_prepare),
    "train": (_add_train, _run_train),
    "eval": (_add_eval, _run_eval),
    "complete": (_add_complete, _run_complete),
    "attention": (cli_reports.add_attention, cli_reports.run_attention),
    "inspect": (cli_reports.add_inspect, cli_reports.run_inspect),
    "lesson": (cli_reports.add_lesson, cli_reports.run_lesson),
    "compare": (cli_reports.add_compare, cli_reports.run_compare),
    "demo": (cli_reports.add_demo, cli_reports.run_demo),
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
        return COMMANDS[args.command][1](args)
    except UserError as exc:
        print(f"seqlab: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("seqlab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
