"""Commands that use a trained RUN_DIR: `seqlab eval`, `calibrate`, `complete`, `tradeoff` and `phrases`.

Each is a pair `add_<name>(subparsers)` / `run_<name>(args)`; heavy imports happen in `run_`. The options are
the fields of a `seqlab.options` dataclass (flags built by `seqlab.cli.options`); the work is a method of
`seqlab.Run` (`seqlab/api/runs.py`), called with the same options; these functions parse, call it and print.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from seqlab.cli.arguments import add_run_reader
from seqlab.cli.options import add_options, add_options_between, options_from
from seqlab.options import CalibrateOptions, CompleteOptions, EvalOptions, PhrasesOptions, TradeoffOptions


def add_eval(sub: argparse._SubParsersAction) -> None:
    p = add_run_reader(sub, "eval", help="loss, perplexity, bits per byte, compressor baselines and ExactMatch",
                       description="Evaluate RUN_DIR's best checkpoint over every window of a split: loss per "
                       "token, perplexity, bits per byte of the original text beside gzip/bz2/xz on the same "
                       "text, and Smart-Compose-style ExactMatch@N with coverage.")
    add_options_between(p, EvalOptions, {
        "threshold": lambda p: p.add_argument("--json", action="store_true", help="print one JSON object"),
        "saved_emails": lambda p: p.add_argument("--plot", type=Path, default=None, metavar="FILE.png",
                                                 help="also draw ExactMatch against coverage to this PNG"),
        "precision": lambda p: p.add_argument("--device", default="auto")})


def run_eval(args: argparse.Namespace) -> int:
    import json

    from seqlab.api.runs import Run
    from seqlab.evaluation.report import format_eval

    options = options_from(EvalOptions, args)
    result = Run(args.run_dir, device=args.device).evaluate(**dataclasses.asdict(options))
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(format_eval(result))
        if "dynamic" in result:
            from seqlab.evaluation.dynamic import format_dynamic

            print("\n".join(format_dynamic(result["dynamic"])))
    if args.plot is not None:
        from seqlab.studies.coverage import save_coverage_plot

        path = save_coverage_plot(result, args.plot, args.run_dir.name)
        print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def add_calibrate(sub: argparse._SubParsersAction) -> None:
    p = add_run_reader(sub, "calibrate", help="choose the confidence threshold the server suggests at",
                       description="Find the confidence threshold at which RUN_DIR's model shows a suggestion "
                       "at the target fraction of word boundaries of held-out emails, report ExactMatch@N "
                       "there, and write it to RUN_DIR/calibration.json for the autocomplete server.")
    add_options(p, CalibrateOptions)
    p.add_argument("--device", default="auto")


def run_calibrate(args: argparse.Namespace) -> int:
    from seqlab.api.runs import Run
    from seqlab.evaluation.calibration import CALIBRATION, format_calibration

    options = options_from(CalibrateOptions, args)
    result = Run(args.run_dir, device=args.device).calibrate(**dataclasses.asdict(options))
    print(format_calibration(result))
    print(f"wrote {args.run_dir / CALIBRATION}")
    return 0


def add_complete(sub: argparse._SubParsersAction) -> None:
    p = add_run_reader(sub, "complete", help="suggest how an email goes on", text="prompt",
                       description="Print the model's suggestion for the next words of PROMPT (greedy by "
                       "default). With --threshold, print nothing when the model is unsure.")
    add_options_between(p, CompleteOptions, {"phrases": lambda p: p.add_argument("--show-confidence",
                                                                                 action="store_true")})
    p.add_argument("--device", default="auto")


def run_complete(args: argparse.Namespace) -> int:
    from seqlab.api.runs import load

    options = options_from(CompleteOptions, args)
    c = load(args.run_dir, device=args.device).complete(args.prompt, **dataclasses.asdict(options))
    print(f"{c.text}\t(confidence {c.confidence:.3f})" if args.show_confidence else c.text)
    return 0


def add_phrases(sub: argparse._SubParsersAction) -> None:
    p = add_run_reader(sub, "phrases", help="fit a person's phrase model for `complete`/`eval --phrases`",
                       description="Count the token n-grams of a DATA_DIR's train split (a person's own mail) "
                       "and write them to RUN_DIR/phrases.npz, the cache model `complete --phrases` and `eval "
                       "--phrases` blend into the model's predictions (as Smart Compose blends a personal "
                       "n-gram model).")
    add_options(p, PhrasesOptions)


def run_phrases(args: argparse.Namespace) -> int:
    from seqlab.api.runs import Run

    options = options_from(PhrasesOptions, args)
    fitted = Run(args.run_dir, device="cpu").fit_phrases(**dataclasses.asdict(options))
    print(f"{fitted['emails']} emails, {fitted['tokens']:,} tokens of {fitted['data']}: {fitted['rows']:,} (context, "
          f"next token) pairs of {options.min_context}-{options.max_context} tokens; wrote {fitted['path']}")
    return 0


def add_tradeoff(sub: argparse._SubParsersAction) -> None:
    p = add_run_reader(sub, "tradeoff", help="saved characters against wrong suggestions, for each suggestion rule",
                       description="Type held-out emails word by word with RUN_DIR's suggestions and measure, for "
                       "each suggestion rule (first-word, expected-chars) at a grid of thresholds, the share of "
                       "characters accepted suggestions save against the wrong suggestions shown per 100 words; "
                       "write tradeoff.json, tradeoff.md (the table) and tradeoff.png (the curve) to --out.")
    p.add_argument("--out", type=Path, required=True, help="folder for tradeoff.json, .md and .png")
    add_options(p, TradeoffOptions)
    p.add_argument("--device", default="auto")


def run_tradeoff(args: argparse.Namespace) -> int:
    from seqlab.api.runs import Run
    from seqlab.evaluation.report import format_best
    from seqlab.studies.tradeoff import format_tradeoff, save_tradeoff

    options = options_from(TradeoffOptions, args)
    result = Run(args.run_dir, device=args.device).tradeoff(**dataclasses.asdict(options))
    print(format_tradeoff(result["curve"]))
    print("\n".join(format_best(result["best"])))
    for path in save_tradeoff(result, args.out, args.run_dir.name):
        print(f"wrote {path}")
    return 0
