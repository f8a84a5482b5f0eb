"""The confidence threshold a served model suggests at: `calibrate_run`, `load_calibration`, `format_calibration`.

The autocomplete server shows a suggestion only when its confidence (the first word's probability,
`seqlab.generation.complete`) is at least a threshold. A fixed number means different things for
different models, so the threshold is chosen per run for a target coverage (the fraction of word
boundaries where a suggestion is shown), on held-out emails, exactly as `seqlab eval --coverage` does
(`seqlab.evaluation.exact_match`): same emails for the same seed and count, same positions, same scores.

The result is `RUN_DIR/calibration.json`, written atomically:

    {"threshold": 0.41, "target_coverage": 0.5, "coverage": 0.5, "exact_match": {"1": 0.6, "2": ..., "3": ...},
     "exact_match_counts": {...}, "exact_match_ci95": {"1": [0.45, 0.73], ...}, "shown": 40, "positions": 80,
     "split": "val", "emails": 40,
     "positions_per_email": 2, "max_words": 3, "seed": 0, "data_dir": "..."}

With `target="saved"` (`seqlab calibrate --target saved`) the threshold is instead the one whose saved
characters are largest while wrong suggestions stay at most `max_wrong_per_100` per 100 words typed
(`seqlab.evaluation.saved_chars.best_threshold`), for a `rule` (default expected-chars: the threshold is
then in characters), emails typed with suggestions asked where `ask` says (every letter, as the compose
page asks, by default); the file then holds "rule", "target": "saved", the saved share and wrong
suggestions per 100 words there with their bootstrap intervals, and how the emails were typed ("ask").
A file without "rule" gates the first word's probability, as every file did before rules existed.

`coverage` is what the threshold reaches, which can exceed the target (ties at the threshold) or fall
short of it (when fewer positions get any proposal at all). ExactMatch values are None where no shown
position has that many true words. `load_run` does not say which checkpoint step it loaded, so the file
records no step: recalibrate after training on.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from seqlab.data.store import TokenStore
from seqlab.errors import UserError
from seqlab.evaluation.exact_match import completion_quality
from seqlab.evaluation.saved_chars import best_threshold, type_emails
from seqlab.evaluation.scored_emails import check_same_tokenizer, completion_contexts, completion_texts
from seqlab.generation.gate import CHARS_PER_WRONG, DEFAULT_RULE, EXPECTED_CHARS, FIRST_WORD, RULES, check_rule
from seqlab.options import CalibrateOptions
from seqlab.printed_command import printed_command
from seqlab.runs.checkpoint_files import atomic_write_text
from seqlab.runs.load import load_run, resolve_device, run_data_dir

CALIBRATION = "calibration.json"
ASK_WORDS = {"every-letter": "every letter", "word-starts": "word starts"}  # how `ask` reads in a sentence


def calibrate_run(run_dir: Path | str, options: CalibrateOptions | None = None, *, device: str = "auto",
                  positions_per_email: int = 2, seed: int = 0) -> dict[str, Any]:
    """The threshold that shows `coverage` of the word boundaries of `split`, with ExactMatch@1..max_words
    there at up to `positions_per_email` boundaries per email (or, with `target="saved"`, the `rule`'s
    threshold that saves the most characters within the cap on wrong suggestions, emails typed for `words`
    words with suggestions asked where `ask` says); written to RUN_DIR/calibration.json (see module doc) and
    returned. `CalibrateOptions` says what each option means."""
    o = options or CalibrateOptions()
    if positions_per_email < 1:
        raise UserError(f"the number of positions per email must be at least 1, not {positions_per_email}.")
    split, emails, coverage, max_words = o.split, o.emails, o.coverage, o.words_per_suggestion
    run_dir = Path(run_dir)
    model, tok, _ = load_run(run_dir, resolve_device(device))
    data = run_data_dir(run_dir, o.data)
    check_same_tokenizer(tok, data, run_dir)
    store = TokenStore(data, split)
    texts = completion_texts(store, tok, emails, seed)
    if o.target == "saved":
        typed = type_emails(model, tok, texts, words=o.words, max_words=max_words, ask=o.ask,
                            contexts=completion_contexts(model, store, emails, seed))
        if not any(e.boundaries for e in typed):
            raise UserError(f"the {split} split of {data} has no word boundaries to calibrate on; "
                            f"use a larger split or a larger data folder.")
        best = best_threshold(typed, o.rule, o.max_wrong_per_100)
        result = {**best, "target": "saved", "split": split, "words_per_email": o.words, "max_words": max_words,
                  "ask": o.ask,
                  "seed": seed, "data_dir": str(data)}
        atomic_write_text(run_dir / CALIBRATION, json.dumps(result, indent=2, sort_keys=True) + "\n")
        return result
    quality = completion_quality(model, tok, texts, max_words=max_words, positions_per_email=positions_per_email,
                                 seed=seed, target_coverage=coverage,
                                 contexts=completion_contexts(model, store, emails, seed))  # read as served
    if quality["positions"] == 0:
        raise UserError(f"the {split} split of {data} has no word boundaries to calibrate on; "
                        f"use a larger split or a larger data folder.")
    at = quality["at_coverage"]
    result: dict[str, Any] = {
        "threshold": at["threshold"], "target_coverage": coverage, "coverage": at["coverage"],
        "exact_match": at["exact_match"], "exact_match_counts": at["exact_match_counts"],
        "exact_match_ci95": at["exact_match_ci95"], "shown": at["shown"],
        "positions": at["positions"], "split": split, "emails": len(texts),
        "positions_per_email": positions_per_email, "max_words": max_words, "seed": seed, "data_dir": str(data),
    }
    atomic_write_text(run_dir / CALIBRATION, json.dumps(result, indent=2, sort_keys=True) + "\n")
    return result


def load_calibration(run_dir: Path | str) -> dict[str, Any] | None:
    """RUN_DIR/calibration.json as written by `calibrate_run`; None when there is none.

    A file that is not a JSON object with a threshold in [0, 1] is a `UserError` naming it: a server must
    not silently show suggestions at a threshold nobody chose.
    """
    path = Path(run_dir) / CALIBRATION
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path} is not a readable calibration file ({exc}); "
                        f"run `{printed_command('calibrate', run_dir)}` again.") from None
    threshold = data.get("threshold") if isinstance(data, dict) else None
    rule = data.get("rule", FIRST_WORD) if isinstance(data, dict) else FIRST_WORD
    if rule not in RULES:
        raise UserError(f"{path} names no known suggestion rule; run `{printed_command('calibrate', run_dir)}` again.")
    top = 1.0 if rule == FIRST_WORD else math.inf  # a probability, or expected saved characters
    if (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
            or not math.isfinite(threshold) or not 0.0 <= threshold <= top):
        raise UserError(f"{path} has no threshold " + ("between 0 and 1" if rule == FIRST_WORD else "of 0 or more")
                        + f"; run `{printed_command('calibrate', run_dir)}` again.")
    return data


def _pct(x: float | None) -> str:
    return "    -" if x is None else f"{100 * x:5.1f}%"


def format_calibration(result: dict[str, Any]) -> str:
    """A few lines for the terminal: the threshold, the coverage it reaches, ExactMatch there (or, for the
    saved target, the characters saved and wrong suggestions shown there)."""
    if result.get("target") == "saved":
        s_ci, w_ci = result["saved_ci95"] or [0, 0], result["wrong_per_100_words_ci95"] or [0, 0]
        lines = [
            f"{result['split']} split: {result['emails']} emails typed for up to {result['words_per_email']} words "
            f"({result['chars']:,} characters), up to {result['max_words']} words per suggestion, asked at "
            f"{ASK_WORDS.get(result.get('ask', 'word-starts'), result.get('ask'))}",
            f"  {result['rule']} threshold {result['threshold']:.4g}"
            + (" characters" if result["rule"] == EXPECTED_CHARS
               else " characters per wrong suggestion" if result["rule"] == CHARS_PER_WRONG else "")
            + f": saved {_pct(result['saved']).strip()} of the characters [{100 * s_ci[0]:.1f}-{100 * s_ci[1]:.1f}], "
            f"{result['wrong_per_100_words'] or 0:.2f} wrong suggestions per 100 words [{w_ci[0]:.2f}-{w_ci[1]:.2f}] "
            f"(cap {result['max_wrong_per_100']:g})",
            f"  {result['shown']} suggestions shown, {result['accepted']} accepted, {result['wrong']} wrong"
            + (f", {result['typed_through']} characters typed through one" if "typed_through" in result else ""),
        ]
        if not result["within_cap"]:
            lines.append("  no threshold keeps to the cap: this is the highest one tried")
        return "\n".join(lines)
    em = "  ".join(f"EM@{n} {_pct(v)}" for n, v in result["exact_match"].items())
    lines = [
        f"{result['split']} split: {result['emails']} emails, {result['positions']} word boundaries, "
        f"up to {result['max_words']} words per suggestion",
        f"  threshold {result['threshold']:.4f}: coverage {_pct(result['coverage'])} "
        f"(target {_pct(result['target_coverage']).strip()})",
        f"  at that threshold: {em}",
    ]
    if result["coverage"] < result["target_coverage"]:
        lines.append("  the target coverage is out of reach: the model proposes nothing at the other positions")
    return "\n".join(lines)


def served_gate(run_dir: Path | str, rule: str | None, threshold: float | None) -> tuple[str, float | None]:
    """The rule and threshold suggestions are shown at: the given ones, else the run's calibration.json,
    else the default rule with no threshold. A bad pair is a `UserError`."""
    if rule is None and threshold is None:
        calibration = load_calibration(run_dir)
        if calibration is not None:
            return calibration.get("rule", FIRST_WORD), float(calibration["threshold"])
    rule = rule or DEFAULT_RULE
    try:
        check_rule(rule, threshold)
    except ValueError as exc:
        raise UserError(f"{exc}.") from None
    return rule, threshold
