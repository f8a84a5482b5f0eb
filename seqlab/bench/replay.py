"""The replay: a person's held-out mail typed and sent one email at a time, learning on against learning off.

    python -m seqlab.bench.replay RUN_DIR DATA_DIR [DATA_DIR ...] --out OUT.json [--words 50] [--emails N]

RUN_DIR is a general model that never saw these people; each DATA_DIR is one person's mail (`seqlab prepare
--sender ADDRESS --tokenizer-from RUN_DIR`). Each person's emails (all splits by default: the general model
saw none of them), in date order (the date of each email read from its source,
`evaluation.dynamic.split_metadata`), are typed word by word as `evaluation.saved_chars` types them (a
proposal at every word boundary of the first `words` words), then "sent":

- learning off: the general model types every email;
- learning on: the server's own `Learner` (seqlab/serving/learner.py, its default settings), given each email
  once it is sent, takes the steps an idle server takes for it (`passes` steps), and the next email is typed
  with the weights it would have swapped in. The learner runs in-process rather than behind HTTP so that
  the comparison is of what is learned, not of when an idle second happens to come.

Both are scored at the run's served setting (calibration.json's rule and threshold, else first-word at 0):
the share of typed characters saved, wrong suggestions shown per 100 words, and ExactMatch@1 and @3 of the
suggestions shown (their first one or three words are the email's next ones). Intervals are 95% percentile
bootstraps over emails, the learning-on minus learning-off differences paired (the same emails resampled
for both), so an interval that excludes zero says learning changed the figure.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import nn

from seqlab.data.layout import SPLITS
from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import Tokenizer
from seqlab.evaluation.calibration import load_calibration
from seqlab.evaluation.dynamic import split_metadata
from seqlab.evaluation.saved_chars import TypedEmail, score_typing, simulate, type_emails
from seqlab.generation.complete import split_words
from seqlab.generation.gate import FIRST_WORD, kept_words
from seqlab.runs.load import load_run
from seqlab.serving.learner import Learner, LearnSettings
from seqlab.serving.personal import PersonalStore, SentEmail

BOOTSTRAP = 1000


def person_emails(data_dir: Path, tokenizer: Tokenizer, splits: Sequence[str] = SPLITS,
                  limit: int | None = None) -> list[str]:
    """A person's emails in `splits` of their DATA_DIR as text (subject, blank line, body), in date order
    (undated ones last). The general model saw none of them, so all of a person's mail can be replayed:
    a new user starting from the general model, the server learning as they send."""
    dated: list[tuple[bool, float, int, str]] = []
    for split in splits:
        store = TokenStore(data_dir, split)
        for m in split_metadata(data_dir, split, store.num_emails):
            ids = [t for t in store.email(m.index).tolist() if not tokenizer.is_special(t)]
            dated.append((m.date is None, m.date or 0.0, len(dated), tokenizer.decode(ids)))
    texts = [text for *_, text in sorted(dated)]
    return texts[:limit] if limit is not None else texts


def replay(model: nn.Module, tokenizer: Tokenizer, emails: Sequence[str], *, words: int = 50,
           settings: LearnSettings | None = None) -> tuple[list[TypedEmail], list[TypedEmail]]:
    """(typed with learning off, typed with learning on) for `emails` in the order given."""
    frozen = type_emails(model, tokenizer, emails, words=words)
    settings = settings or LearnSettings()
    learned: list[TypedEmail] = []
    with tempfile.TemporaryDirectory() as folder:
        learner = Learner(model, tokenizer, PersonalStore(folder), idle=lambda: True, on_swap=lambda m: None,
                          settings=settings)
        current = model
        for text in emails:
            learned += type_emails(current, tokenizer, [text], words=words)
            subject, _, body = text.partition("\n\n")
            for _ in range(settings.passes):  # what an idle server does with the email just sent
                learner.step(SentEmail(subject, body))
            current = copy.deepcopy(learner.model).eval()
    return frozen, learned


def exact_match(email: TypedEmail, rule: str, threshold: float | None, k: int) -> tuple[int, int]:
    """(suggestions shown whose first k words are the email's next k words, suggestions shown with at least
    k words), at every word boundary of the email's typed part."""
    hits = shown = 0
    for b in email.boundaries:
        if kept_words(b.text, b.word_confidences, rule, threshold) < k:
            continue
        shown += 1
        hits += split_words(b.text)[:k] == split_words(email.text[b.offset:email.end])[:k]
    return hits, shown


# each figure as a ratio of two per-email counts: (numerator, denominator, scale)
FIGURES = {"saved": ("saved", "chars", 1.0), "wrong_per_100_words": ("wrong", "words", 100.0),
           "exact_match@1": ("em1", "shown1", 1.0), "exact_match@3": ("em3", "shown3", 1.0)}


def email_counts(typed: Sequence[TypedEmail], rule: str, threshold: float | None) -> list[dict[str, int]]:
    """Per email, the counts every figure is a ratio of (so a bootstrap only adds them up again)."""
    out = []
    for email in typed:
        t = simulate(email, rule, threshold)
        (em1, shown1), (em3, shown3) = (exact_match(email, rule, threshold, k) for k in (1, 3))
        out.append({"saved": t.saved, "chars": t.chars, "wrong": t.wrong, "words": t.words,
                    "em1": em1, "shown1": shown1, "em3": em3, "shown3": shown3})
    return out


def figures(counts: Sequence[dict[str, int]]) -> dict[str, float | None]:
    """Each figure of FIGURES over the emails of `counts` (None when its denominator is 0)."""
    out: dict[str, float | None] = {}
    for name, (top, bottom, scale) in FIGURES.items():
        den = sum(c[bottom] for c in counts)
        out[name] = scale * sum(c[top] for c in counts) / den if den else None
    return out


def paired_intervals(off: Sequence[dict[str, int]], on: Sequence[dict[str, int]], resamples: int = BOOTSTRAP,
                     seed: int = 0) -> dict[str, list[float] | None]:
    """95% bootstrap intervals of (on - off) for each figure, the same emails resampled for both."""
    rng = random.Random(seed)
    n = len(off)
    diffs: dict[str, list[float]] = {name: [] for name in FIGURES}
    for _ in range(resamples):
        pick = [rng.randrange(n) for _ in range(n)]
        a, b = figures([off[i] for i in pick]), figures([on[i] for i in pick])
        for name in FIGURES:
            if a[name] is not None and b[name] is not None:
                diffs[name].append(b[name] - a[name])  # type: ignore[operator]
    out: dict[str, list[float] | None] = {}
    for name, values in diffs.items():
        values.sort()
        out[name] = [values[int(0.025 * (len(values) - 1))], values[int(0.975 * (len(values) - 1))]] if values \
            else None
    return out


def learned_right(off: Sequence[TypedEmail], on: Sequence[TypedEmail], rule: str, threshold: float | None,
                  count: int = 5) -> list[dict[str, str]]:
    """Up to `count` boundaries where learning made the suggestion right: with learning on, a suggestion of
    two or more words was shown and is exactly the email's next words; with it off, the one shown (if any)
    was wrong or shorter. The longest first, with the text just before them."""
    found = []
    for a, b in zip(off, on):
        for x, y in zip(a.boundaries, b.boundaries):
            k_on = kept_words(y.text, y.word_confidences, rule, threshold)
            if k_on < 2:
                continue
            shown_on = " ".join(split_words(y.text)[:k_on])
            truth = split_words(b.text[y.offset:b.end])
            if split_words(y.text)[:k_on] != truth[:k_on]:
                continue
            k_off = kept_words(x.text, x.word_confidences, rule, threshold)
            got_off = split_words(x.text)[:k_off]
            if k_off and got_off == truth[:k_off] and k_off >= k_on:
                continue  # it was right without learning too
            found.append({"before": b.text[max(b.start, y.offset - 60):y.offset], "on": shown_on,
                          "off": " ".join(got_off) if k_off else "(nothing shown)"})
    found.sort(key=lambda e: -len(e["on"]))
    return found[:count]


def measure(run_dir: Path, people: Sequence[Path], *, words: int = 50, limit: int | None = None,
            splits: Sequence[str] = SPLITS, settings: LearnSettings | None = None) -> dict[str, Any]:
    """The replay of every person in `people`, one row each, and all of them pooled."""
    model, tok, _ = load_run(run_dir, "cpu")
    calibration = load_calibration(run_dir) or {}
    rule = calibration.get("rule", FIRST_WORD) if calibration else FIRST_WORD
    threshold = float(calibration["threshold"]) if calibration else 0.0
    rows, pooled_off, pooled_on = [], [], []
    for data_dir in people:
        emails = person_emails(data_dir, tok, splits, limit)
        typed_off, typed_on = replay(model, tok, emails, words=words, settings=settings)
        off, on = email_counts(typed_off, rule, threshold), email_counts(typed_on, rule, threshold)
        pooled_off += off
        pooled_on += on
        rows.append({"person": data_dir.name, "emails": len(emails), "off": figures(off), "on": figures(on),
                     "learned_right": learned_right(typed_off, typed_on, rule, threshold),
                     "saved_off": score_typing(typed_off, rule, threshold),
                     "saved_on": score_typing(typed_on, rule, threshold),
                     "on_minus_off_ci95": paired_intervals(off, on)})
        print(f"  {data_dir.name}: {len(emails)} emails, saved {rows[-1]['off']['saved']} -> "
              f"{rows[-1]['on']['saved']}", flush=True)
    pooled = {"emails": len(pooled_off), "off": figures(pooled_off), "on": figures(pooled_on),
              "on_minus_off_ci95": paired_intervals(pooled_off, pooled_on)}
    return {"run": str(run_dir), "rule": rule, "threshold": threshold, "words": words, "splits": list(splits),
            "settings": vars(settings or LearnSettings()), "people": rows, "pooled": pooled}


def format_table(result: dict[str, Any]) -> str:
    """The replay as a Markdown table: each person and the pool, learning off -> on, with the paired intervals."""
    lines = [f"rule {result['rule']} at {result['threshold']:g}; first {result['words']} words of each email", "",
             "| person | emails | saved off -> on | wrong/100 words off -> on | EM@1 off -> on | EM@3 off -> on |",
             "|---|---:|---|---|---|---|"]

    def cell(row: dict[str, Any], key: str, scale: float, unit: str) -> str:
        a, b, ci = row["off"][key], row["on"][key], row["on_minus_off_ci95"].get(key)
        if a is None or b is None:
            return "—"
        interval = f" (diff [{scale * ci[0]:+.1f}, {scale * ci[1]:+.1f}])" if ci else ""
        return f"{scale * a:.1f}{unit} -> {scale * b:.1f}{unit}{interval}"

    for row in [*result["people"], {"person": "**pooled**", **result["pooled"]}]:
        lines.append(f"| {row['person']} | {row['emails']} | {cell(row, 'saved', 100, '%')} | "
                     f"{cell(row, 'wrong_per_100_words', 1, '')} | {cell(row, 'exact_match@1', 100, '%')} | "
                     f"{cell(row, 'exact_match@3', 100, '%')} |")
    lines += ["", "Suggestions learning made right (the text before them; learning off -> on):", ""]
    for row in result["people"]:
        for e in row.get("learned_right", [])[:2]:
            lines.append(f"- {row['person']}: …{json.dumps(e['before'])[1:-1]} **{e['on']}** (off: {e['off']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run_dir", type=Path, help="the general model (it never saw these people)")
    p.add_argument("people", type=Path, nargs="+", help="one DATA_DIR per person (prepare --sender)")
    p.add_argument("--out", type=Path, required=True, help="where to write the JSON (and a .md table beside it)")
    p.add_argument("--words", type=int, default=50, help="words typed of each email")
    p.add_argument("--emails", type=int, default=None, help="at most this many emails per person (the earliest)")
    p.add_argument("--splits", default=",".join(SPLITS),
                   help="which of a person's splits to replay, merged in date order (default all: the general "
                   "model saw none of them)")
    args = p.parse_args(argv)
    result = measure(args.run_dir, args.people, words=args.words, limit=args.emails,
                     splits=[s for s in args.splits.split(",") if s])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    table = format_table(result)
    args.out.with_suffix(".md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
