"""The replay, the benchmark of record for suggestions: a person's mail typed and sent one email at a time.

    python -m seqlab.bench.replay RUN_DIR DATA_DIR [DATA_DIR ...] --out OUT.json [--words 50] [--emails N]

RUN_DIR is a general model that never saw these people; each DATA_DIR is one person's mail (`seqlab prepare
--sender ADDRESS --tokenizer-from RUN_DIR`). Each person's emails (all splits by default: the general model
saw none of them), in date order, are typed as `evaluation.saved_chars` counts typing (a suggestion asked
after every typed letter, Tab for all of it, Ctrl+Right per word), then "sent". The levers of the suggestions
are added one at a time, each row keeping the ones above it (`LEVERS`):

- the general model at word starts with 3-word suggestions (how it was counted before), then asked after every
  letter, then with suggestions up to the end of the sentence or line: "everything off", the general model as
  the server serves it to anyone;
- + the person's memory of what they sent before (`generation.memory`), + copies from the message being
  answered (`generation.reply_copy`), + learning (the server's own `Learner` taking an idle server's steps
  after each email), + a threshold, memory weight and model (the learned one or the general one, whichever
  saved more) fitted on the person's own earlier mail and served where it is sure to save more than the
  unfitted setting (`replay_passes.online_settings`, as `serving.recalibrate` fits them).

Every row but the last is scored at the run's served setting (calibration.json's rule and threshold). Figures:
the share of typed characters saved and wrong suggestions shown per 100 words, pooled and per person; their
95% intervals are paired bootstraps over emails of each row minus "everything off" (the same emails
resampled for both), so an interval that excludes zero says the levers changed the figure.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from seqlab.bench import replay_passes as passes
from seqlab.data.layout import SPLITS
from seqlab.evaluation.bootstrap import BOOTSTRAP, draws, interval, ratios
from seqlab.evaluation.calibration import load_calibration
from seqlab.evaluation.typing_sim import TypedEmail, simulate
from seqlab.generation.complete import MAX_SENTENCE_WORDS
from seqlab.generation.gate import EXPECTED_CHARS
from seqlab.runs.load import load_run
from seqlab.serving.learner import LearnSettings
from seqlab.serving.recalibrate import (
    EVERY,
    FIT_GRID,
    GENERAL,
    HELD,
    LEARNED,
    MAX_WRONG_PER_100,
    MIN_EMAILS,
    UNFITTED_MODEL,
    UNFITTED_WEIGHTS,
)

OFF = "off"  # the row the others are compared with: the general model as served to anyone

# (key, what the row adds); each row keeps the levers above it
LEVERS = (("word_starts", "general model, at word starts, 3 words"),
          ("every_letter", "+ asked after every letter"),
          (OFF, "+ up to the sentence's end (everything off)"),
          ("memory", "+ the person's memory"),
          ("reply", "+ copies from the message answered"),
          ("learning", "+ learning"),
          ("per_person", "+ threshold, weight and model fitted per person"))
ON = LEVERS[-1][0]

# each figure as a ratio of two per-email counts: (numerator, denominator, scale)
FIGURES = {"saved": ("saved", "chars", 1.0), "wrong_per_100_words": ("wrong", "words", 100.0)}


def email_counts(typed: Sequence[TypedEmail], rule: str,
                 settings: Sequence[tuple[float, dict[str, float]]]) -> list[dict[str, Any]]:
    """Per email, the counts every figure is a ratio of, at that email's (threshold, weights)."""
    out = []
    for email, (threshold, weights) in zip(typed, settings):
        t = simulate(email, rule, threshold, weights)
        out.append({"saved": t.saved, "chars": t.chars, "wrong": t.wrong, "words": t.words,
                    "saved_by": dict(t.saved_by)})
    return out


def figures(counts: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """Each figure of FIGURES over the emails of `counts` (None when its denominator is 0)."""
    out: dict[str, float | None] = {}
    for name, (top, bottom, scale) in FIGURES.items():
        den = sum(c[bottom] for c in counts)
        out[name] = scale * sum(c[top] for c in counts) / den if den else None
    return out


def source_shares(counts: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Each source's share of the saved characters."""
    total: dict[str, int] = {}
    for c in counts:
        for s, n in c["saved_by"].items():
            total[s] = total.get(s, 0) + n
    saved = sum(total.values())
    return {s: n / saved for s, n in sorted(total.items())} if saved else {}


def paired_intervals(off: Sequence[dict[str, Any]], on: Sequence[dict[str, Any]], resamples: int = BOOTSTRAP,
                     seed: int = 0) -> dict[str, list[float] | None]:
    """95% bootstrap intervals of (on - off) for each figure, the same emails resampled for both."""
    picks = draws(len(off), resamples, seed)

    def resampled(counts: Sequence[dict[str, Any]], top: str, bottom: str, scale: float) -> np.ndarray:
        return ratios([c[top] for c in counts], [c[bottom] for c in counts], picks, scale)

    return {name: interval(resampled(on, *how) - resampled(off, *how)) for name, how in FIGURES.items()}


def person_rows(model: Any, tok: Any, person: passes.Person, rule: str, threshold: float, *, words: int,
                settings: LearnSettings | None, cap: float,
                keep: dict[str, list[TypedEmail]] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Per lever (LEVERS), the per-email counts of one person's replay; `keep` gets the typings the
    per-person row chooses between (model name -> one per email)."""
    long = MAX_SENTENCE_WORDS
    served = [(threshold, {})] * len(person.emails)
    starts = passes.frozen_pass(model, tok, person, words=words, max_words=3, ask="word-starts")
    frozen = passes.frozen_pass(model, tok, person, words=words, max_words=long, ask="every-letter")
    with_memory = passes.add_memory(passes.limited(frozen, long, []), person)
    learned = passes.add_reply(passes.add_memory(
        passes.learned_pass(model, tok, person, words=words, max_words=long, ask="every-letter",
                            settings=settings), person), person)
    typed: dict[str, Callable[[], list[TypedEmail]]] = {
        "word_starts": lambda: passes.limited(starts, 3, []),
        "every_letter": lambda: passes.limited(frozen, 3, []),
        OFF: lambda: passes.limited(frozen, long, []),
        "memory": lambda: with_memory,
        "reply": lambda: passes.add_reply(with_memory, person),
        "learning": lambda: learned,
    }
    rows = {key: email_counts(build(), rule, served) for key, build in typed.items()}
    # the served model chosen per person too: the learned one, or the general one where it saves more
    typings = {LEARNED: learned, GENERAL: passes.add_reply(with_memory, person)}
    chosen = passes.online_settings(typings, rule, (UNFITTED_MODEL, threshold, UNFITTED_WEIGHTS), cap,
                                    min_emails=MIN_EMAILS, every=EVERY, window=HELD, weight_grid=FIT_GRID)
    if keep is not None:
        keep.update(typings)
    rows["per_person"] = email_counts([typings[name][e] for e, (name, _, _) in enumerate(chosen)], rule,
                                      [(t, w) for _, t, w in chosen])
    for count, (name, _, _) in zip(rows["per_person"], chosen):
        count["model"] = name  # the model served for this email
    return rows


def summary(rows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Figures of each lever, their paired intervals against "everything off", and source shares."""
    return {key: {"figures": figures(rows[key]), "minus_off_ci95": paired_intervals(rows[OFF], rows[key]),
                  "saved_by_source": source_shares(rows[key])} for key, _ in LEVERS}


def measure(run_dir: Path, people: Sequence[Path], *, words: int = 50, limit: int | None = None,
            splits: Sequence[str] = SPLITS, settings: LearnSettings | None = None,
            cap: float = MAX_WRONG_PER_100, typings: Path | None = None) -> dict[str, Any]:
    """The replay of every person in `people`, one row each, and all of them pooled; with `typings`, the
    typings of the per-person row written there as JSON (person -> model -> emails, `TypedEmail.to_json`),
    so that other fits can be tried over them without typing again."""
    model, tok, _ = load_run(run_dir, "cpu")
    calibration = load_calibration(run_dir) or {}
    rule = calibration.get("rule", EXPECTED_CHARS)
    threshold = float(calibration["threshold"]) if calibration else 0.0
    result: dict[str, Any] = {"run": str(run_dir), "rule": rule, "threshold": threshold, "words": words,
                              "splits": list(splits), "cap": cap, "settings": vars(settings or LearnSettings()),
                              "levers": dict(LEVERS), "people": []}
    pooled: dict[str, list[dict[str, Any]]] = {key: [] for key, _ in LEVERS}
    kept_all: dict[str, Any] = {}
    for data_dir in people:
        person = passes.person_mail(data_dir, tok, splits, limit)
        kept: dict[str, list[TypedEmail]] = {}
        rows = person_rows(model, tok, person, rule, threshold, words=words, settings=settings, cap=cap, keep=kept)
        kept_all[person.name] = {name: [t.to_json() for t in typed] for name, typed in kept.items()}
        for key in pooled:
            pooled[key] += rows[key]
        result["people"].append({"person": person.name, "emails": len(person.emails),
                                 "replies": sum(bool(c.strip()) for c in person.contexts),
                                 "served_general": sum(c["model"] == GENERAL for c in rows[ON]), **summary(rows)})
        got = result["people"][-1]
        print(f"  {person.name}: {len(person.emails)} emails, saved {got[OFF]['figures']['saved']} -> "
              f"{got[ON]['figures']['saved']}", flush=True)
    result["pooled"] = {"emails": len(pooled[OFF]), **summary(pooled)}
    if typings is not None:
        typings.parent.mkdir(parents=True, exist_ok=True)
        typings.write_text(json.dumps({"rule": rule, "threshold": threshold, "people": kept_all}) + "\n")
    return result


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _ci(ci: list[float] | None, scale: float) -> str:
    return "" if not ci else f" [{scale * ci[0]:+.1f}, {scale * ci[1]:+.1f}]"


def format_table(result: dict[str, Any]) -> str:
    """The replay as Markdown: the levers pooled, then each person off -> on."""
    pooled = result["pooled"]
    lines = [f"served: {result['rule']} at {result['threshold']:g}; first {result['words']} words of each email; "
             f"per-person fit within {result['cap']:g} wrong per 100 words", "",
             "| lever | saved (diff to off) | wrong / 100 words (diff to off) | saved by source |",
             "|---|---|---|---|"]
    for key, label in LEVERS:
        row = pooled[key]
        f, ci = row["figures"], row["minus_off_ci95"]
        wrong = f["wrong_per_100_words"]
        shares = ", ".join(f"{s} {100 * v:.0f}%" for s, v in row["saved_by_source"].items())
        lines.append(f"| {label} | {_pct(f['saved'])}{_ci(ci['saved'], 100)} | "
                     f"{'—' if wrong is None else f'{wrong:.2f}'}{_ci(ci['wrong_per_100_words'], 1)} | {shares} |")
    lines += ["", "| person | emails | replies | general model served | saved off -> on "
              "| wrong / 100 words off -> on |", "|---|---:|---:|---:|---|---|"]
    general = sum(p["served_general"] for p in result["people"])
    for p in [*result["people"], {"person": "**pooled**", "replies": "", "served_general": general, **pooled}]:
        off, on = p[OFF]["figures"], p[ON]["figures"]
        ci = p[ON]["minus_off_ci95"]
        w_off, w_on = off["wrong_per_100_words"], on["wrong_per_100_words"]
        lines.append(f"| {p['person']} | {p['emails']} | {p['replies']} | {p['served_general']} | "
                     f"{_pct(off['saved'])} -> {_pct(on['saved'])}{_ci(ci['saved'], 100)} | "
                     f"{w_off or 0:.2f} -> {w_on or 0:.2f}{_ci(ci['wrong_per_100_words'], 1)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run_dir", type=Path, help="the general model (it never saw these people)")
    p.add_argument("people", type=Path, nargs="+", help="one DATA_DIR per person (prepare --sender)")
    p.add_argument("--out", type=Path, required=True, help="where to write the JSON (and a .md table beside it)")
    p.add_argument("--words", type=int, default=50, help="words typed of each email")
    p.add_argument("--emails", type=int, default=None, help="at most this many emails per person (the earliest)")
    p.add_argument("--max-wrong", type=float, default=MAX_WRONG_PER_100,
                   help="wrong suggestions per 100 words the per-person fit keeps to")
    p.add_argument("--splits", default=",".join(SPLITS),
                   help="which of a person's splits to replay, merged in date order (default all: the general "
                   "model saw none of them)")
    p.add_argument("--typings", type=Path, default=None,
                   help="also write the per-person row's typings here (JSON), to try other fits over them")
    args = p.parse_args(argv)
    result = measure(args.run_dir, args.people, words=args.words, limit=args.emails, cap=args.max_wrong,
                     splits=[s for s in args.splits.split(",") if s], typings=args.typings)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    table = format_table(result)
    args.out.with_suffix(".md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
