"""The served threshold and the memory's blend weight, fitted on the person's own sent mail as it grows.

calibration.json's threshold was chosen on the run's validation split, other people's mail, and the
memory's blend weight is 1.0 until fitted; a fixed weight halves the gain of a personal model in the
personalisation literature. Under `serve --learn`, once the person has sent `MIN_EMAILS` emails and
`EVERY` more since the last fit, the learner's thread (while the server is idle and nothing is left to
learn) types the last `HELD` of them as the compose page asks (after every letter, each suggestion to
the end of its sentence, `MAX_SENTENCE_WORDS` at most), with the served model and a memory of
everything else (--memory's mail and the earlier sent emails: never the email being typed), and fits the
(threshold, weights) that save the most characters within `MAX_WRONG_PER_100` wrong suggestions per 100
words (`seqlab.evaluation.saved_fit.fit_setting`, the replay `seqlab eval` uses).

The result is kept in RUN_DIR/personal/served.json (0600, beside the sent emails; `forget` deletes it),
applied to the engine on the model thread between two requests, and read again by the next `serve
--learn`. The setting is of the default rule (`chars-per-wrong`, `seqlab.generation.gate`), whatever
rule calibration.json chose (the fitted rule is served with its threshold); a server whose run was
calibrated by the first word's probability, or told `--min-confidence`, which the person chose, is left
as it is.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from typing import Any

from torch import nn

from seqlab.data.tokenizer import Tokenizer
from seqlab.evaluation.saved_chars import type_emails
from seqlab.evaluation.saved_fit import WEIGHT_GRID, fit_setting
from seqlab.generation.complete import MAX_SENTENCE_WORDS
from seqlab.generation.gate import DEFAULT_RULE
from seqlab.serving.engine import prompt_text
from seqlab.serving.personal import PersonalStore, SentEmail
from seqlab.serving.remembered import build_memory, sent_label

SERVED = "served.json"  # in RUN_DIR/personal
MIN_EMAILS = 10  # sent emails before the first fit
EVERY = 5  # new ones before the next
HELD = 8  # the newest emails typed for a fit
WORDS = 40  # words typed of each
MAX_WRONG_PER_100 = 3.0  # the cap on wrong suggestions


def fit_on_sent(model: nn.Module, tokenizer: Tokenizer, emails: list[SentEmail], background: list[tuple[str, str]],
                *, held: int = HELD, words: int = WORDS, max_words: int = MAX_SENTENCE_WORDS,
                max_wrong_per_100: float = MAX_WRONG_PER_100) -> dict[str, Any]:
    """Type the newest `held` of `emails` with `model` and a memory of `background` (text, label) and the
    other emails, and fit (threshold, memory weight) under the default rule (module doc).
    Returns the setting with what it scored: saved share, wrong per 100 words, whether within the cap."""
    typed_ones, others = emails[-held:], emails[:-held]
    memory = build_memory(background, None)
    memory.max_words = max_words  # as the page asks: to the end of the sentence, at most max_words
    for e in others:
        memory.add_body(e.body, sent_label(e))
    typed = type_emails(model, tokenizer, [prompt_text(e.subject, e.body) for e in typed_ones], words=words,
                        max_words=max_words, sentence=True, proposers=[memory.propose])
    row = fit_setting(typed, DEFAULT_RULE, max_wrong_per_100, weight_grid={"memory": WEIGHT_GRID})
    return {"rule": DEFAULT_RULE, "threshold": float(row["threshold"]),
            "weights": {"memory": float(row.get("weights", {}).get("memory", 1.0))},
            "emails": len(emails), "typed": len(typed_ones), "saved": row.get("saved"),
            "wrong_per_100_words": row.get("wrong_per_100_words"), "within_cap": bool(row.get("within_cap")),
            "t": time.time()}


def load_served(store: PersonalStore) -> dict[str, Any] | None:
    """The setting fitted before (served.json), None when there is none or it cannot be read."""
    path = store.folder / SERVED
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = (isinstance(data, dict) and data.get("rule") == DEFAULT_RULE and isinstance(data.get("threshold"), float)
          and isinstance(data.get("weights"), dict))
    return data if ok else None


class Recalibrator:
    """The idle task that refits the served setting (module doc): `due()`, then `run()`.

    `model()` gives the model served now (copied before use: the model thread keeps serving it);
    `on_fitted(setting)` applies a new setting; `background` is --memory's mail."""

    def __init__(self, model: Callable[[], nn.Module], tokenizer: Tokenizer, store: PersonalStore,
                 background: list[tuple[str, str]], on_fitted: Callable[[dict[str, Any]], None], *,
                 min_emails: int = MIN_EMAILS, every: int = EVERY, held: int = HELD, words: int = WORDS) -> None:
        self.model, self.tokenizer, self.store, self.background = model, tokenizer, store, background
        self.on_fitted = on_fitted
        self.min_emails, self.every, self.held, self.words = min_emails, every, held, words
        self.last = load_served(store)
        self.failed: str | None = None

    def due(self) -> bool:
        """Enough sent emails, and enough new ones since the last fit."""
        count = len(self.store)
        fitted = int(self.last["emails"]) if self.last is not None else 0
        return self.failed is None and count >= self.min_emails and (self.last is None or count - fitted >= self.every)

    def run(self) -> dict[str, Any] | None:
        """Fit, keep (served.json, 0600) and apply a new setting; None when it failed (said in `failed`)."""
        try:
            model = copy.deepcopy(self.model()).eval()
            setting = fit_on_sent(model, self.tokenizer, self.store.emails(), self.background, held=self.held,
                                  words=self.words)
            self.store.write_file(SERVED, (json.dumps(setting, indent=1) + "\n").encode("utf-8"))
        except Exception as exc:  # noqa: BLE001 (reported by /health; serving goes on with the setting it has)
            self.failed = f"{type(exc).__name__}: {exc}"
            return None
        self.last = setting
        self.on_fitted(setting)
        return setting
