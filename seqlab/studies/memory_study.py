"""The person's memory, measured: how fast a lookup is, and how well its confidences are calibrated.

`WritingMemory` (seqlab/generation/memory.py) is filled with a prepared mailbox's train split, then the test
split's emails are typed in order, a lookup every `step` characters of each body (each typed email joins
the memory after it, as a sent one does on the server):

- lookup: the wall time of each `propose` (mean, p50, p90, p99), and the memory's size;
- calibration: for each proposal, its match length L, the matches n, how many agree on its first word,
  the letters typed of the word being typed, and whether its first word is the email's next one. The
  shrinkage `agree / (n + alpha / evidence**power)`, evidence = L + min(letters, 3), is fitted by log loss
  over a grid of (alpha, power), pooled over the DATA_DIRs given (one per person), and scored leaving each
  one out; the plain `agree / (n + alpha)` beside it. The table gives the observed share right by
  confidence decile at the fitted setting. Then the later words: `beta` of `memory.chained` fitted by
  log loss of "the first k words are right" over every prefix, at the served ALPHA, with the mean
  confidence and share right of the first k words beside each other.

    python -m seqlab.studies.memory_study DATA_DIR [DATA_DIR ...] [--step 2] [--emails 100] [--json OUT]

This study chose the memory's ALPHA and the form of the shrinkage (the experiments index has the figures).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import load_tokenizer
from seqlab.evaluation.compressors import split_texts
from seqlab.generation.gate import word_ends
from seqlab.generation.memory import ALPHA, EVIDENCE_LETTERS, WritingMemory, chained, split_prompt

ALPHAS = (0.5, 1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 24.0, 32.0)
POWERS = (0.0, 1.0, 1.5, 2.0, 3.0)  # power 0: the plain agree / (n + alpha)
BETAS = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)  # beta 0: a later word as sure as the share agreeing on it


@dataclass(frozen=True)
class Observed:
    """One proposal: match length, matches, matches agreeing on its first word, letters typed, right or not."""

    person: str
    length: int
    matches: int
    agree: int
    letters: int
    right: bool
    counts: tuple[int, ...] = ()  # matches agreeing on the first k words, k = 1..
    words_right: int = 0  # how many of its words were the email's next ones (a prefix)


def confidence(o: Observed, alpha: float, power: float) -> float:
    """agree / (n + alpha / evidence**power), evidence = L + min(letters, EVIDENCE_LETTERS)."""
    evidence = o.length + min(o.letters, EVIDENCE_LETTERS)
    return o.agree / (o.matches + alpha / evidence**power)


def log_loss(rows: Sequence[Observed], f: Callable[[Observed], float]) -> float:
    """Mean negative log-likelihood of `right` under the probabilities f(row) (clipped to [1e-6, 1 - 1e-6])."""
    total = 0.0
    for o in rows:
        p = min(1 - 1e-6, max(1e-6, f(o)))
        total -= math.log(p if o.right else 1 - p)
    return total / len(rows)


def type_mailbox(data_dir: Path, *, step: int = 2,
                 emails: int = 100) -> tuple[list[Observed], list[float], WritingMemory]:
    """Fill a memory with the train split, type the first `emails` test emails (module doc); the proposals
    observed, the seconds of each lookup, and the memory at the end."""
    tok = load_tokenizer(data_dir / "tokenizer.json")
    memory = WritingMemory(alpha=0.0, beta=0.0)  # no shrinkage: word_confidences[k] is agree_k / n
    for i, text in enumerate(split_texts(TokenStore(data_dir, "train"), tok)):
        memory.add(text, str(i))
    rows, seconds = [], []
    for text in split_texts(TokenStore(data_dir, "test"), tok)[:emails]:
        subject, _, body = text.partition("\n\n")
        for i in range(0, len(body), step):
            prompt = text[: len(subject) + 2 + i]
            start = time.perf_counter()
            c = memory.propose(prompt)
            seconds.append(time.perf_counter() - start)
            if c is None:
                continue
            before, partial = split_prompt(prompt)
            matches = memory.matches(before, partial)
            ends = word_ends(c.text)
            right = next((k for k, end in enumerate(ends) if not body[i:].startswith(c.text[:end])), len(ends))
            counts = tuple(round(q * len(matches)) for q in c.word_confidences)
            rows.append(Observed(data_dir.name, matches[0].length, len(matches), counts[0], len(partial),
                                 right >= 1, counts, right))
        memory.add(text, "typed")
    return rows, seconds, memory


def fit(rows: Sequence[Observed], powers: Sequence[float] = POWERS) -> tuple[float, float]:
    """The (alpha, power) of the grid with the least log loss over `rows`."""
    grid = [(a, p) for a in ALPHAS for p in powers]
    return min(grid, key=lambda ap: log_loss(rows, lambda o: confidence(o, *ap)))


def leave_one_out(rows: Sequence[Observed], powers: Sequence[float]) -> float | None:
    """Log loss of each person's proposals under the setting fitted on the others', pooled."""
    people = sorted({o.person for o in rows})
    if len(people) < 2:
        return None
    total = 0.0
    for person in people:
        mine = [o for o in rows if o.person == person]
        alpha, power = fit([o for o in rows if o.person != person], powers)
        total += log_loss(mine, lambda o, a=alpha, p=power: confidence(o, a, p)) * len(mine)
    return total / len(rows)


def word_log_loss(rows: Sequence[Observed], alpha: float, beta: float) -> float:
    """Mean negative log-likelihood, over every prefix of every proposal, of "its first k words are right"
    under `memory.chained` at (alpha, beta)."""
    total, n = 0.0, 0
    for o in rows:
        for k, q in enumerate(chained(list(o.counts), o.matches, o.length + min(o.letters, EVIDENCE_LETTERS),
                                      alpha, beta), start=1):
            q = min(1 - 1e-6, max(1e-6, q))
            total -= math.log(q if o.words_right >= k else 1 - q)
            n += 1
    return total / max(n, 1)


def by_words(rows: Sequence[Observed], alpha: float, beta: float, most: int = 8) -> list[dict[str, Any]]:
    """Mean confidence and share right of the first k words, k = 1..most (the last row: k >= most)."""
    sums: dict[int, list[float]] = {}
    for o in rows:
        for k, q in enumerate(chained(list(o.counts), o.matches, o.length + min(o.letters, EVIDENCE_LETTERS),
                                      alpha, beta), start=1):
            row = sums.setdefault(min(k, most), [0.0, 0.0, 0.0])
            row[0] += q
            row[1] += o.words_right >= k
            row[2] += 1
    return [{"words": k, "confidence": c / n, "right": r / n, "prefixes": int(n)}
            for k, (c, r, n) in sorted(sums.items())]


def deciles(rows: Sequence[Observed], alpha: float, power: float) -> list[dict[str, Any]]:
    """Proposals and the share right per confidence decile."""
    bins: dict[int, list[int]] = {}
    for o in rows:
        b = min(9, int(10 * confidence(o, alpha, power)))
        bins.setdefault(b, [0, 0])
        bins[b][0] += 1
        bins[b][1] += o.right
    return [{"confidence": f"{b / 10:.1f}-{(b + 1) / 10:.1f}", "proposals": n, "right": k / n}
            for b, (n, k) in sorted(bins.items())]


def study(data_dirs: Sequence[Path], *, step: int = 2, emails: int = 100) -> dict[str, Any]:
    """Lookup times and the calibration fit over `data_dirs` (module doc), as a JSON-able dict."""
    rows: list[Observed] = []
    lookups = []
    for d in data_dirs:
        seen, seconds, memory = type_mailbox(d, step=step, emails=emails)
        rows.extend(seen)
        ms = sorted(1000 * s for s in seconds)
        lookups.append({"data": str(d), "emails": len(memory), "tokens": memory.tokens, "lookups": len(ms),
                        "proposals": len(seen), "mean_ms": statistics.fmean(ms) if ms else None,
                        **{f"p{q}_ms": ms[min(len(ms) - 1, int(len(ms) * q / 100))] if ms else None
                           for q in (50, 90, 99)}})
    out: dict[str, Any] = {"lookups": lookups, "proposals": len(rows)}
    if rows:
        best = fit(rows)
        plain = fit(rows, (0.0,))
        out["fit"] = {"alpha": best[0], "power": best[1], "log_loss": log_loss(rows, lambda o: confidence(o, *best)),
                      "leave_one_person_out": leave_one_out(rows, POWERS[1:])}
        out["plain"] = {"alpha": plain[0], "log_loss": log_loss(rows, lambda o: confidence(o, *plain)),
                        "leave_one_person_out": leave_one_out(rows, (0.0,))}
        out["deciles"] = deciles(rows, *best)
        beta = min(BETAS, key=lambda b: word_log_loss(rows, ALPHA, b))
        out["later_words"] = {"alpha": ALPHA, "beta": beta, "log_loss": word_log_loss(rows, ALPHA, beta),
                              "log_loss_beta_0": word_log_loss(rows, ALPHA, 0.0),
                              "by_words": by_words(rows, ALPHA, beta)}
        out["share_right"] = sum(o.right for o in rows) / len(rows)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m seqlab.studies.memory_study", description=__doc__.split("\n\n")[0])
    p.add_argument("data_dirs", nargs="+", type=Path, metavar="DATA_DIR")
    p.add_argument("--step", type=int, default=2, help="characters between two lookups (default 2)")
    p.add_argument("--emails", type=int, default=100, help="test emails typed per DATA_DIR (default 100)")
    p.add_argument("--json", type=Path, default=None, help="write the result here too")
    args = p.parse_args(argv)
    result = study(args.data_dirs, step=args.step, emails=args.emails)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
