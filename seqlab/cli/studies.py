"""Subcommands that study trained models: attention, inspect, lesson, compare and demo.

Each subcommand is a pair `add_<name>(subparsers)` / `run_<name>(args)`; heavy imports happen in `run_`
(the lesson table imported here holds names and times only).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from seqlab.cli.arguments import add_run_reader, positive_float, positive_int, unit_float
from seqlab.studies import lessons


def _wrote(paths: Iterable[Path | str]) -> int:
    """Say which files a command wrote; the command's exit code."""
    for path in paths:
        print(f"wrote {path}")
    return 0


# ---------------------------------------------------------------- inspection


def add_attention(sub: argparse._SubParsersAction) -> None:
    p = add_run_reader(sub, "attention", help="attention heatmaps and the soft-lookup table for a text", text="text",
                       description="Draw the attention weights of every layer and head (or the chosen ones) "
                       "for TEXT, tokens as axis labels, and the soft-lookup view of one query position: the "
                       "keys it scored, their weights and what each value contributed.")
    p.add_argument("--out", type=Path, required=True, help="FILE.png or FILE.html")
    p.add_argument("--layer", type=int, default=None)
    p.add_argument("--head", type=int, default=None)
    p.add_argument("--query", type=int, default=None, help="token position of the soft-lookup (default: last)")
    p.add_argument("--reply-to", type=Path, default=None, metavar="FILE",
                   help="the message TEXT answers (a message file or plain text): draw instead the "
                   "cross-attention weights of TEXT's tokens over it (a run trained with a model.context)")


def run_attention(args: argparse.Namespace) -> int:
    if args.reply_to is not None:
        from seqlab.inspection.cross import cross_command

        return _wrote([cross_command(args.run_dir, args.text, args.reply_to, args.out, args.layer, args.head)])
    from seqlab.api.runs import load
    from seqlab.inspection.plots import output_kind

    output_kind(args.out)  # a bad suffix fails before the model is loaded
    view = load(args.run_dir, device="cpu").attention(args.text, layer=args.layer, head=args.head, query=args.query)
    if view.maps.note:
        print(f"note: {view.maps.note}", file=sys.stderr)
    return _wrote(view.save(args.out))


def add_inspect(sub: argparse._SubParsersAction) -> None:
    p = add_run_reader(sub, "inspect", help="position encodings and GRU gate activations for a text", text="text",
                       description="Write heatmaps of the sinusoidal encoding, of learned position embeddings' "
                       "similarity (if the model has them) and of GRU update/reset gates over TEXT (if a GRU).")
    p.add_argument("--out", type=Path, required=True, help="output folder")


def run_inspect(args: argparse.Namespace) -> int:
    from seqlab.api.runs import load

    run = load(args.run_dir, device="cpu")
    view = run.inspect(args.text)
    if view.gates and len(run.tokenizer.encode(args.text)) + 1 > len(view.gates[0][0]):
        print(f"note: the gate view shows the last {len(view.gates[0][0])} tokens of the text.", file=sys.stderr)
    return _wrote(view.save(args.out))


# ---------------------------------------------------------------- lessons


def lesson_times() -> str:
    """The table of lesson run times by size that `seqlab lesson --help` ends with."""
    lines = ["time on 2 CPU cores by --size (* marks the default: the largest size that takes",
             "about a minute):"]
    for lesson in lessons.LESSONS.values():
        sizes = "".join(f"{size} {time}{' *' if size == lesson.default_size else ''}".ljust(17)
                        for size, time in lesson.times.items())
        lines.append(f"  {lesson.name:<15} {sizes}".rstrip())
    return "\n".join(lines)


def add_lesson(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lesson", help="run one of the lecture's experiments",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=lesson_times(),
                       description="Run one of the lecture's experiments and write a plot, a table and a\n"
                       "paragraph saying what was measured:\n" + ", ".join(lessons.LESSONS) + ".")
    p.add_argument("name", help=" | ".join(lessons.LESSONS))
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--size", choices=lessons.SIZES, default=None,
                   help="tiny: seconds; small: the real measurement (default: per lesson, see below)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")


def run_lesson(args: argparse.Namespace) -> int:
    from seqlab.api.lessons import lesson

    result = lesson(args.name, args.out, size=args.size, seed=args.seed, progress=not args.quiet)
    print(result.paragraph)
    return _wrote(result.files)


# ---------------------------------------------------------------- compare and demo


def add_compare(sub: argparse._SubParsersAction) -> None:
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
    budget.add_argument("--minutes", type=positive_float, default=None, help="wall-clock training minutes per model")
    budget.add_argument("--tokens", type=positive_int, default=None, help="training tokens per model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--coverage", type=unit_float, default=0.5, help="coverage at which ExactMatch is compared")
    p.add_argument("--completion-emails", type=positive_int, default=100)
    p.add_argument("--no-match-params", action="store_true", help="keep each family at the preset's width")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for every model")


def run_compare(args: argparse.Namespace) -> int:
    from seqlab.studies.compare.compare_runs import compare, format_table
    from seqlab.studies.compare.plan import parse_models

    results = compare(args.data_dir, args.out, preset=args.preset, models=parse_models(args.models),
                      minutes=args.minutes, tokens=args.tokens, seed=args.seed, progress=not args.quiet,
                      overrides=args.overrides, coverage=args.coverage, match_params=not args.no_match_params,
                      completion_emails=args.completion_emails)
    print(format_table(results))
    print(f"wrote {args.out}/report.md, report.html, results.csv, results.json")
    return 0


def add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="prepare SpamAssassin ham, train a GRU and an attention model, compare them",
                       description="The main job: prepare the SpamAssassin ham corpus, train a small GRU and a "
                       "small multi-head RoPE attention model for a few minutes each, evaluate both on the test "
                       "split beside xz, and print a table and completions. About 10 minutes on 2 CPU cores.")
    p.add_argument("--out", type=Path, default=Path("out/demo"), help="output folder (default out/demo)")
    p.add_argument("--minutes", type=positive_float, default=3.5, help="training minutes per model (default 3.5)")
    p.add_argument("--source", default="spamassassin", help="mail source (default spamassassin)")
    p.add_argument("--quiet", action="store_true")


def run_demo(args: argparse.Namespace) -> int:
    from seqlab.studies.demo import demo

    demo(args.out, source=args.source, minutes=args.minutes, progress=not args.quiet)
    return 0
