"""The `seqlab` command line: argparse subcommands, user errors as exit code 2 with one sentence.

Each subcommand is a pair of functions, `_add_<name>(subparsers)` and `_run_<name>(args)`. Heavy modules
are imported inside the `_run_` functions so that `seqlab --help` is instant and nothing runs at import.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Sequence

from seqlab import __version__
from seqlab.errors import UserError


def _split_fractions(text: str) -> tuple[float, float, float]:
    try:
        parts = tuple(float(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--split expects three numbers like 0.9,0.05,0.05, not {text!r}") from None
    if len(parts) != 3 or any(p < 0 for p in parts) or abs(sum(parts) - 1.0) > 1e-6:
        raise argparse.ArgumentTypeError(f"--split expects three non-negative fractions that sum to 1, not {text!r}")
    return parts  # type: ignore[return-value]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}")
    return value


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
    p.add_argument("--vocab-size", type=_positive_int, default=4096, help="BPE vocabulary size (default 4096)")
    p.add_argument("--split", type=_split_fractions, default=(0.9, 0.05, 0.05), help="train,val,test fractions")
    p.add_argument("--seed", type=int, default=0, help="seed of the thread-to-split hash (default 0)")
    p.add_argument("--keep-quotes", action="store_true", help="keep quoted replies and forwarded text")
    p.add_argument("--keep-signatures", action="store_true", help="keep signatures after '-- '")
    p.add_argument("--mask-pii", action="store_true", help="replace email addresses, URLs and phone numbers")
    p.add_argument("--limit", type=_positive_int, default=None, help="read at most N messages")
    p.add_argument("--count", type=_positive_int, default=2000, help="emails to generate for 'synthetic'")
    p.add_argument("--groups", default=None, help="spamassassin groups, comma-separated (default: the ham groups)")
    p.add_argument("--cache-dir", type=Path, default=None, help="download cache (default ~/.cache/seqlab)")
    p.add_argument("--workers", type=_positive_int, default=None,
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


def _unit_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, not {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, not {text!r}")
    return value


def _add_eval(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="loss, perplexity, bits per byte, compressor baselines and ExactMatch",
                       description="Evaluate RUN_DIR's best checkpoint over every window of a split: loss per "
                       "token, perplexity, bits per byte of the original text beside gzip/bz2/xz on the same "
                       "text, and Smart-Compose-style ExactMatch@N with coverage.")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--data", type=Path, default=None, help="DATA_DIR (default: the one the run trained on)")
    p.add_argument("--split", choices=("val", "test"), default="val")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--threshold", type=_unit_float, default=0.0,
                   help="propose a completion only when the first word's probability is at least this")
    p.add_argument("--coverage", type=_unit_float, default=None,
                   help="also report ExactMatch at the threshold that gives this coverage")
    p.add_argument("--completion-emails", type=_positive_int, default=100)
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
    p.add_argument("--max-words", type=_positive_int, default=5)
    p.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default)")
    p.add_argument("--top-k", type=_positive_int, default=None)
    p.add_argument("--top-p", type=_unit_float, default=None)
    p.add_argument("--beam", type=_positive_int, default=1)
    p.add_argument("--seed", type=int, default=None, help="seed for sampling (reproducible)")
    p.add_argument("--threshold", type=_unit_float, default=None, help="minimum confidence to suggest anything")
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


# ---------------------------------------------------------------- inspection and lessons


def _add_attention(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("attention", help="attention heatmaps and the soft-lookup table for a text",
                       description="Draw the attention weights of every layer and head (or the chosen ones) "
                       "for TEXT, tokens as axis labels, and the soft-lookup view of one query position: the "
                       "keys it scored, their weights and what each value contributed.")
    p.add_argument("run_dir", type=Path)
    p.add_argument("text")
    p.add_argument("--out", type=Path, required=True, help="FILE.png or FILE.html")
    p.add_argument("--layer", type=int, default=None)
    p.add_argument("--head", type=int, default=None)
    p.add_argument("--query", type=int, default=None, help="token position of the soft-lookup (default: last)")


def _run_attention(args: argparse.Namespace) -> int:
    from seqlab.inspection import attention_command, lookup_path
    from seqlab.plots import output_kind

    out = attention_command(args.run_dir, args.text, args.out, layer=args.layer, head=args.head, query=args.query)
    print(f"wrote {out}")
    if output_kind(out) == "png":
        print(f"wrote {lookup_path(out)}")
    return 0


def _add_inspect(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="position encodings and GRU gate activations for a text",
                       description="Write heatmaps of the sinusoidal encoding, of learned position embeddings' "
                       "similarity (if the model has them) and of GRU update/reset gates over TEXT (if a GRU).")
    p.add_argument("run_dir", type=Path)
    p.add_argument("text")
    p.add_argument("--out", type=Path, required=True, help="output folder")


def _run_inspect(args: argparse.Namespace) -> int:
    from seqlab.inspection import inspect_command

    for path in inspect_command(args.run_dir, args.out, args.text):
        print(f"wrote {path}")
    return 0


def _add_lesson(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lesson", help="run one of the lecture's experiments",
                       description="Run one of the lecture's experiments and write a plot, a table and a "
                       "paragraph saying what was measured: permutation, scaling, gradient-path, parallel, memory.")
    p.add_argument("name", help="permutation | scaling | gradient-path | parallel | memory")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--size", choices=("tiny", "small"), default="small", help="tiny: seconds; small: minutes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")


def _run_lesson(args: argparse.Namespace) -> int:
    from seqlab.lessons import LESSONS, run_lesson

    if args.name not in LESSONS:
        raise UserError(f"unknown lesson {args.name!r}; choose one of {', '.join(LESSONS)}")
    result = run_lesson(args.name, args.out, size=args.size, seed=args.seed, progress=not args.quiet)
    print(result.paragraph)
    for path in result.files:
        print(f"wrote {path}")
    return 0


# ---------------------------------------------------------------- compare


def _add_compare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="train several architectures on one corpus with a matched budget, report",
                       description="Train a set of architectures on DATA_DIR with the same budget (tokens or "
                       "minutes) and, where the families allow, the same parameter count within 10%; write "
                       "report.md, report.html, results.csv and results.json to REPORT_DIR. Models: rnn, gru, "
                       "mingru, attn1 (single head), attn-none, attn-learned, attn-sinusoidal, attn-rope, attn-alibi.")
    p.add_argument("data_dir", type=Path)
    p.add_argument("--out", type=Path, required=True, help="REPORT_DIR")
    p.add_argument("--preset", default="small", help="tiny | small (default small)")
    p.add_argument("--models", default=None, help="comma-separated model names (default: all)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--minutes", type=float, default=None, help="wall-clock training minutes per model")
    budget.add_argument("--tokens", type=_positive_int, default=None, help="training tokens per model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--coverage", type=_unit_float, default=0.5, help="coverage at which ExactMatch is compared")
    p.add_argument("--completion-emails", type=_positive_int, default=100)
    p.add_argument("--no-match-params", action="store_true", help="keep each family at the preset's width")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for every model")


def _run_compare(args: argparse.Namespace) -> int:
    from seqlab.compare import compare, format_table
    from seqlab.compare_plan import parse_models

    if args.minutes is not None and args.minutes <= 0:
        raise UserError(f"--minutes must be positive, not {args.minutes}")
    results = compare(args.data_dir, args.out, preset=args.preset, models=parse_models(args.models),
                      minutes=args.minutes, tokens=args.tokens, seed=args.seed, progress=not args.quiet,
                      overrides=args.overrides, coverage=args.coverage, match_params=not args.no_match_params,
                      completion_emails=args.completion_emails)
    print(format_table(results))
    print(f"wrote {args.out}/report.md, report.html, results.csv, results.json")
    return 0


# ---------------------------------------------------------------- demo


def _add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="prepare SpamAssassin ham, train a GRU and an attention model, compare them",
                       description="The main job: prepare the SpamAssassin ham corpus, train a small GRU and a "
                       "small multi-head RoPE attention model for a few minutes each, evaluate both on the test "
                       "split beside xz, and print a table and completions. About 10 minutes on 2 CPU cores.")
    p.add_argument("--out", type=Path, default=Path("out/demo"), help="output folder (default out/demo)")
    p.add_argument("--minutes", type=float, default=3.5, help="training minutes per model (default 3.5)")
    p.add_argument("--source", default="spamassassin", help="mail source (default spamassassin)")
    p.add_argument("--quiet", action="store_true")


def _run_demo(args: argparse.Namespace) -> int:
    from seqlab.demo import demo

    if args.minutes <= 0:
        raise UserError(f"--minutes must be positive, not {args.minutes}")
    demo(args.out, source=args.source, minutes=args.minutes, progress=not args.quiet)
    return 0


# ---------------------------------------------------------------- entry point

COMMANDS: dict[str, tuple[Callable[[argparse._SubParsersAction], None], Callable[[argparse.Namespace], int]]] = {
    "prepare": (_add_prepare, _run_prepare),
    "train": (_add_train, _run_train),
    "eval": (_add_eval, _run_eval),
    "complete": (_add_complete, _run_complete),
    "attention": (_add_attention, _run_attention),
    "inspect": (_add_inspect, _run_inspect),
    "lesson": (_add_lesson, _run_lesson),
    "compare": (_add_compare, _run_compare),
    "demo": (_add_demo, _run_demo),
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
