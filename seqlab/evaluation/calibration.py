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
from seqlab.evaluation.run import check_same_tokenizer, completion_contexts, completion_texts
from seqlab.runs.files import atomic_write_text
from seqlab.runs.load import load_run, resolve_device, run_data_dir

CALIBRATION = "calibration.json"


def _check_options(split: str, coverage: float, emails: int, positions_per_email: int, max_words: int) -> None:
    if split not in ("train", "val", "test"):
        raise UserError(f"split must be train, val or test, not {split!r}.")
    # `not 0 < x <= 1` also refuses nan, whose comparisons are all false.
    if isinstance(coverage, bool) or not isinstance(coverage, (int, float)) or not 0.0 < coverage <= 1.0:
        raise UserError(f"the target coverage must be in (0, 1], not {coverage}.")
    for name, value in (("emails", emails), ("positions per email", positions_per_email),
                        ("max words", max_words)):
        if value < 1:
            raise UserError(f"the number of {name} must be at least 1, not {value}.")


def calibrate_run(run_dir: Path | str, data_dir: Path | str | None = None, split: str = "val",
                  coverage: float = 0.5, emails: int = 200, positions_per_email: int = 2, max_words: int = 3,
                  seed: int = 0, *, device: str = "auto") -> dict[str, Any]:
    """The threshold that shows `coverage` of the word boundaries of `split`, with ExactMatch@1..max_words
    there; written to RUN_DIR/calibration.json (see module doc) and returned."""
    _check_options(split, coverage, emails, positions_per_email, max_words)
    run_dir = Path(run_dir)
    model, tok, _ = load_run(run_dir, resolve_device(device))
    data = run_data_dir(run_dir, data_dir)
    check_same_tokenizer(tok, data, run_dir)
    store = TokenStore(data, split)
    texts = completion_texts(store, tok, emails, seed)
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
                        f"run `seqlab calibrate {run_dir}` again.") from None
    threshold = data.get("threshold") if isinstance(data, dict) else None
    if (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
            or not math.isfinite(threshold) or not 0.0 <= threshold <= 1.0):
        raise UserError(f"{path} has no threshold between 0 and 1; run `seqlab calibrate {run_dir}` again.")
    return data


def _pct(x: float | None) -> str:
    return "    -" if x is None else f"{100 * x:5.1f}%"


def format_calibration(result: dict[str, Any]) -> str:
    """A few lines for the terminal: the threshold, the coverage it reaches, ExactMatch there."""
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
