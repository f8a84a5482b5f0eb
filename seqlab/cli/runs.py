"""Commands that use a trained RUN_DIR: `seqlab eval`, `seqlab calibrate`, `seqlab complete`, `seqlab phrases`.

Each is a pair `add_<name>(subparsers)` / `run_<name>(args)`; heavy imports happen in `run_`. The work is a
method of `seqlab.Run` (`seqlab/api/runs.py`); these functions parse, call it and print.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from seqlab.cli.arguments import add_run_reader, positive_int, unit_float

RULES = ("first-word", "expected-chars", "chars-per-wrong")  # seqlab.generation.gate.RULES, named here so
DEFAULT_RULE = "chars-per-wrong"  # --help imports nothing; gate.DEFAULT_RULE
MAX_SENTENCE_WORDS = 12  # seqlab.generation.complete.MAX_SENTENCE_WORDS, likewise
ASK_MODES = ("every-letter", "word-starts")  # seqlab.evaluation.saved_chars.ASK_MODES, likewise
ASK_HELP = ("where the simulated writer is offered suggestions: every-letter (after every typed character, as the "
            "compose page asks; default) or word-starts (at word starts only, the earlier counting)")


def non_negative_float(text: str) -> float:
    """A finite number of 0 or more."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of 0 or more, not {text!r}")
    return value


def coverages(text: str) -> tuple[float, ...]:
    """--coverages: comma-separated fractions in (0, 1], e.g. 0.05,0.1,0.2,0.5,1."""
    try:
        values = tuple(float(p) for p in text.split(","))
    except ValueError:
        values = ()
    if not values or not all(0.0 < v <= 1.0 for v in values):
        raise argparse.ArgumentTypeError(f"expected fractions in (0, 1] like 0.05,0.1,0.5,1, not {text!r}")
    return values


def _add_phrase_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--phrases", action="store_true",
                   help="blend the person's phrase model (RUN_DIR/phrases.npz, from `seqlab phrases`) into the "
                   "model's predictions")
    p.add_argument("--phrase-weight", type=unit_float, default=0.3,
                   help="largest share of the phrase model in the blend (default 0.3)")


def add_eval(sub: argparse._SubParsersAction) -> None:
    p = add_run_reader(sub, "eval", help="loss, perplexity, bits per byte, compressor baselines and ExactMatch",
                       description="Evaluate RUN_DIR's best checkpoint over every window of a split: loss per "
                       "token, perplexity, bits per byte of the original text beside gzip/bz2/xz on the same "
                       "text, and Smart-Compose-style ExactMatch@N with coverage.")
    p.add_argument("--data", type=Path, default=None, help="DATA_DIR (default: the one the run trained on)")
    p.add_argument("--split", choices=("val", "test"), default="val")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--threshold", type=unit_float, default=0.0,
                   help="propose a completion only when the first word's probability is at least this")
    p.add_argument("--coverage", type=unit_float, default=None,
                   help="also report ExactMatch at the threshold that gives this coverage")
    p.add_argument("--completion-emails", type=positive_int, default=200,
                   help="held-out emails completions are scored on (default 200)")
    p.add_argument("--positions-per-email", type=positive_int, default=5,
                   help="word boundaries drawn per email (default 5)")
    p.add_argument("--coverages", type=coverages, default=(0.05, 0.1, 0.2, 0.5, 1.0),
                   help="coverages of the ExactMatch table (default 0.05,0.1,0.2,0.5,1)")
    p.add_argument("--plot", type=Path, default=None, metavar="FILE.png",
                   help="also draw ExactMatch against coverage to this PNG")
    p.add_argument("--saved-emails", type=positive_int, default=None,
                   help="held-out emails typed word by word for saved characters (default 100, at most "
                   "--completion-emails)")
    p.add_argument("--saved-words", type=positive_int, default=50,
                   help="words typed of each of them (default 50)")
    p.add_argument("--no-saved", action="store_true", help="skip saved characters")
    p.add_argument("--ask", choices=ASK_MODES, default="every-letter", help=ASK_HELP)
    p.add_argument("--rule", choices=RULES, default=None,
                   help="suggestion rule saved characters are reported at (default: the run's calibration.json, "
                   "else chars-per-wrong)")
    p.add_argument("--saved-threshold", type=non_negative_float, default=None,
                   help="threshold of --rule: a probability for first-word, characters for expected-chars, "
                   "characters per wrong suggestion for chars-per-wrong")
    p.add_argument("--max-wrong", type=non_negative_float, default=3.0,
                   help="wrong suggestions per 100 words the best threshold of each rule may show (default 3)")
    p.add_argument("--dynamic", action="store_true",
                   help="also evaluate with dynamic evaluation (a gradient step on each test email after "
                   "scoring it, in date order per sender); the run on disk is not changed")
    p.add_argument("--dynamic-lr", type=non_negative_float, default=None,
                   help="learning rate of --dynamic's steps (default: the method's; 0 equals the frozen model)")
    p.add_argument("--dynamic-method", choices=("rms", "sgd"), default="rms",
                   help="rms: Krause et al.'s RMS-normalised step (default); sgd: plain SGD")
    _add_phrase_options(p)
    p.add_argument("--device", default="auto")
    p.add_argument("--precision", choices=("run", "fp32", "bf16"), default="run",
                   help="number format of the held-out pass: the run's own train.precision as resolved on "
                        "this machine (default; bf16 moved trained models' bits per byte by about 1e-5), "
                        "or fp32 for exact float32")


def run_eval(args: argparse.Namespace) -> int:
    import json

    from seqlab.api.runs import Run
    from seqlab.evaluation.run_eval import format_eval

    result = Run(args.run_dir, device=args.device).evaluate(
        args.split, data=args.data, threshold=args.threshold, coverage=args.coverage,
        completion_emails=args.completion_emails, positions_per_email=args.positions_per_email,
        coverages=args.coverages, phrases=args.phrases, phrase_weight=args.phrase_weight, precision=args.precision,
        saved=not args.no_saved, saved_emails=args.saved_emails, saved_words=args.saved_words, ask=args.ask,
        rule=args.rule,
        saved_threshold=args.saved_threshold, max_wrong_per_100=args.max_wrong, dynamic=args.dynamic,
        dynamic_lr=args.dynamic_lr, dynamic_method=args.dynamic_method)
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
    p.add_argument("--coverage", type=float, default=0.5,
                   help="target fraction of word boundaries that get a suggestion, in (0, 1] (default 0.5)")
    p.add_argument("--target", choices=("coverage", "saved"), default="coverage",
                   help="coverage: the first word's probability that reaches --coverage; saved: the --rule "
                   "threshold that saves the most characters within --max-wrong (default coverage)")
    p.add_argument("--rule", choices=RULES, default=DEFAULT_RULE, help="the rule --target saved tunes")
    p.add_argument("--max-wrong", type=non_negative_float, default=3.0,
                   help="with --target saved: wrong suggestions allowed per 100 words typed (default 3)")
    p.add_argument("--words", type=positive_int, default=50,
                   help="with --target saved: words typed of each email (default 50)")
    p.add_argument("--ask", choices=ASK_MODES, default="every-letter", help="with --target saved: " + ASK_HELP)
    p.add_argument("--split", choices=("val", "test"), default="val")
    p.add_argument("--emails", type=positive_int, default=200, help="held-out emails to calibrate on")
    p.add_argument("--max-words", type=positive_int, default=None,
                   help="words per suggestion: with --target coverage, ExactMatch@1..N is reported (default 3); "
                   f"with --target saved, a cap (default {MAX_SENTENCE_WORDS}): each suggestion runs to the end "
                   "of its sentence or line, as the compose page asks")
    p.add_argument("--data", type=Path, default=None, help="DATA_DIR (default: the one the run trained on)")
    p.add_argument("--device", default="auto")


def run_calibrate(args: argparse.Namespace) -> int:
    from seqlab.api.runs import Run
    from seqlab.evaluation.calibration import CALIBRATION, format_calibration

    result = Run(args.run_dir, device=args.device).calibrate(
        args.coverage, split=args.split, emails=args.emails, max_words=args.max_words, data=args.data,
        target=args.target, rule=args.rule, max_wrong_per_100=args.max_wrong, words=args.words, ask=args.ask)
    print(format_calibration(result))
    print(f"wrote {args.run_dir / CALIBRATION}")
    return 0


def add_complete(sub: argparse._SubParsersAction) -> None:
    p = add_run_reader(sub, "complete", help="suggest how an email goes on", text="prompt",
                       description="Print the model's suggestion for the next words of PROMPT (greedy by "
                       "default). With --threshold, print nothing when the model is unsure.")
    p.add_argument("--max-words", type=positive_int, default=5)
    p.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default)")
    p.add_argument("--top-k", type=positive_int, default=None)
    p.add_argument("--top-p", type=unit_float, default=None)
    p.add_argument("--beam", type=positive_int, default=1)
    p.add_argument("--seed", type=int, default=None, help="seed for sampling (reproducible)")
    p.add_argument("--threshold", type=non_negative_float, default=None,
                   help="show a suggestion only when worth it: expected saved characters per chance of a wrong "
                   "first word (--rule chars-per-wrong), expected saved characters (--rule expected-chars) "
                   "or the first word's probability (--rule first-word)")
    p.add_argument("--rule", choices=RULES, default=DEFAULT_RULE,
                   help="what --threshold gates (default chars-per-wrong; lone punctuation is never shown)")
    p.add_argument("--show-confidence", action="store_true")
    _add_phrase_options(p)
    p.add_argument("--reply-to", type=Path, default=None, metavar="FILE",
                   help="the message being answered (a message file or plain text), read through "
                   "cross-attention by a model trained with a model.context")
    p.add_argument("--device", default="auto")


def run_complete(args: argparse.Namespace) -> int:
    from seqlab.api.runs import load

    c = load(args.run_dir, device=args.device).complete(
        args.prompt, max_words=args.max_words, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
        beam=args.beam, seed=args.seed, threshold=args.threshold, phrases=args.phrases,
        phrase_weight=args.phrase_weight, reply_to=args.reply_to, rule=args.rule)
    print(f"{c.text}\t(confidence {c.confidence:.3f})" if args.show_confidence else c.text)
    return 0


def add_phrases(sub: argparse._SubParsersAction) -> None:
    p = add_run_reader(sub, "phrases", help="fit a person's phrase model for `complete`/`eval --phrases`",
                       description="Count the token n-grams of a DATA_DIR's train split (a person's own mail) "
                       "and write them to RUN_DIR/phrases.npz, the cache model `complete --phrases` and `eval "
                       "--phrases` blend into the model's predictions (as Smart Compose blends a personal "
                       "n-gram model).")
    p.add_argument("--data", type=Path, default=None, help="DATA_DIR (default: the one the run trained on)")
    p.add_argument("--min-context", type=positive_int, default=4, help="shortest context in tokens (default 4)")
    p.add_argument("--max-context", type=positive_int, default=8, help="longest context in tokens (default 8)")
    p.add_argument("--min-count", type=positive_int, default=2,
                   help="keep contexts seen at least this often (default 2)")


def run_phrases(args: argparse.Namespace) -> int:
    from seqlab.api.runs import Run

    fitted = Run(args.run_dir, device="cpu").fit_phrases(data=args.data, min_context=args.min_context,
                                                         max_context=args.max_context, min_count=args.min_count)
    print(f"{fitted['emails']} emails, {fitted['tokens']:,} tokens of {fitted['data']}: {fitted['rows']:,} (context, "
          f"next token) pairs of {args.min_context}-{args.max_context} tokens; wrote {fitted['path']}")
    return 0


def add_tradeoff(sub: argparse._SubParsersAction) -> None:
    p = add_run_reader(sub, "tradeoff", help="saved characters against wrong suggestions, for each suggestion rule",
                       description="Type held-out emails word by word with RUN_DIR's suggestions and measure, for "
                       "each suggestion rule (first-word, expected-chars) at a grid of thresholds, the share of "
                       "characters accepted suggestions save against the wrong suggestions shown per 100 words; "
                       "write tradeoff.json, tradeoff.md (the table) and tradeoff.png (the curve) to --out.")
    p.add_argument("--out", type=Path, required=True, help="folder for tradeoff.json, .md and .png")
    p.add_argument("--data", type=Path, default=None, help="DATA_DIR (default: the one the run trained on)")
    p.add_argument("--split", choices=("val", "test"), default="test")
    p.add_argument("--emails", type=positive_int, default=100, help="held-out emails typed (default 100)")
    p.add_argument("--words", type=positive_int, default=50, help="words typed of each (default 50)")
    p.add_argument("--max-words", type=positive_int, default=MAX_SENTENCE_WORDS,
                   help=f"words per suggestion at most (default {MAX_SENTENCE_WORDS}): each runs to the end of its "
                   "sentence or line, as the compose page asks")
    p.add_argument("--max-wrong", type=non_negative_float, default=3.0,
                   help="the cap on wrong suggestions per 100 words the best thresholds keep to (default 3)")
    p.add_argument("--ask", choices=ASK_MODES, default="every-letter", help=ASK_HELP)
    p.add_argument("--mid-word", type=int, default=0, metavar="K",
                   help="with --ask word-starts: also ask K letters into each word (default 0)")
    p.add_argument("--device", default="auto")


def run_tradeoff(args: argparse.Namespace) -> int:
    from seqlab.api.runs import Run
    from seqlab.evaluation.run_eval import format_best
    from seqlab.studies.tradeoff import format_tradeoff, save_tradeoff

    result = Run(args.run_dir, device=args.device).tradeoff(
        args.split, data=args.data, emails=args.emails, words=args.words, max_words=args.max_words,
        max_wrong_per_100=args.max_wrong, ask=args.ask, mid_word=args.mid_word)
    print(format_tradeoff(result["curve"]))
    print("\n".join(format_best(result["best"])))
    for path in save_tradeoff(result, args.out, args.run_dir.name):
        print(f"wrote {path}")
    return 0
