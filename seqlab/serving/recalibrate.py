"""The served threshold, the memory's blend weight and the model served, fitted on the person's own sent mail.

calibration.json's threshold was chosen on the run's validation split, other people's mail, with no memory
of the person: under `--learn` the memory's blend weight is `UNFITTED_WEIGHTS`'s until fitted (a new user's
memory at weight 1 shows about twice the wrong suggestions the cap allows, in the replay), and a fixed
weight halves the gain of a personal model in the personalisation literature. Under `serve --learn`, once
the person has sent `MIN_EMAILS` emails and `EVERY` more since the last fit, the learner's thread (while the
server is idle and nothing is left to learn) fits the (threshold, weights) that save the most characters
within `MAX_WRONG_PER_100` wrong suggestions per 100 words (`seqlab.evaluation.saved_fit.fit_setting`, the
replay `seqlab eval` uses) on the last `HELD` of them, typed as the compose page asks (after every letter,
each suggestion to the end of its sentence, `MAX_SENTENCE_WORDS` at most), with a memory of everything else
(--memory's mail and the earlier sent emails: never the email being typed).

Every email is typed held out, as the replay types it (`seqlab.bench.replay`):

- by the learned model as it was before it learned from that email: the learner hands each new email to
  `Recalibrator.observe` before its first step on it, which types it then and keeps the typing (the learned
  weights of the fit's time have learned from the held emails, and would look surer and righter on them than
  on the next email: the threshold fitted on them would let too many wrong suggestions through);
- by the general model (the run's weights), which never learns.

Both are fitted, and the better fit (the learned model's on a tie) is served from then on only where a
paired bootstrap over the typed emails says it saves more than the unfitted setting (the run's threshold
with `UNFITTED_WEIGHTS`, the model `UNFITTED_MODEL`), which is served before the first fit and otherwise
(`seqlab.evaluation.saved_fit.fit_served`): the best of many settings on a few emails is optimistic about
the next ones, and a person for whom nothing helps would be served the luckiest one and lose by it. The
learner goes on learning in case a later fit finds otherwise.

The result is kept in RUN_DIR/personal/served.json and the typings in typed.json (0600, beside the sent
emails; `forget` deletes them), applied to the engine on the model thread between two requests, and read
again by the next `serve --learn`. A fitted setting is of the default rule (`chars-per-wrong`,
`seqlab.generation.gate`), whatever rule calibration.json chose (the fitted rule is served with its
threshold; the unfitted one keeps the run's rule); a server whose run was calibrated by the first word's
probability, or told `--min-confidence`, which the person chose, is left as it is.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from seqlab.data.tokenizer import Tokenizer
from seqlab.evaluation.saved_chars import type_emails, with_source
from seqlab.evaluation.saved_fit import WEIGHT_GRID, fit_served
from seqlab.evaluation.typing_sim import TypedEmail
from seqlab.generation.complete import MAX_SENTENCE_WORDS
from seqlab.generation.gate import DEFAULT_RULE, VALUE_RULES
from seqlab.serving.engine import prompt_text
from seqlab.serving.personal import Forgotten, PersonalStore, SentEmail
from seqlab.serving.remembered import build_memory, sent_label

SERVED = "served.json"  # in RUN_DIR/personal
TYPED = "typed.json"  # in RUN_DIR/personal: the newest sent emails as the learned model typed them
MIN_EMAILS = 5  # sent emails before the first fit
EVERY = 5  # new ones before the next
HELD = 40  # the newest emails typed for a fit: the more, the surer a fit can be of its gain
WORDS = 40  # words typed of each
# What a fit keeps to on the emails it is fitted on: below the cap of 3 wrong suggestions per 100 words,
# since a setting fitted on earlier emails shows more wrong ones on the next (the replay).
MAX_WRONG_PER_100 = 2.0
LEARNED, GENERAL = "learned", "general"  # the model a fit chose to serve
# Served before the first fit and whenever a fit is not sure to save more than it (`fit_served`): the run's
# model at the run's threshold, with these blend weights of the person's memory and the message answered.
UNFITTED_MODEL = GENERAL
UNFITTED_WEIGHTS = {"memory": 0.0, "reply": 0.0}
# The weights a fit tries: the memory's; the answered message's stays as unfitted (its copies are about 1% of
# what is saved, too few to fit on a few emails, and each weight tried multiplies the fit's cost).
FIT_GRID = {"memory": WEIGHT_GRID, "reply": (UNFITTED_WEIGHTS["reply"],)}


def fit_on_sent(general: nn.Module, tokenizer: Tokenizer, emails: list[SentEmail], background: list[tuple[str, str]],
                *, unfitted: tuple[str, float], learned: Mapping[str, TypedEmail] | None = None, held: int = HELD,
                words: int = WORDS, max_words: int = MAX_SENTENCE_WORDS,
                max_wrong_per_100: float = MAX_WRONG_PER_100) -> dict[str, Any]:
    """Fit (threshold, memory weight) under the default rule on the newest `held` of `emails`, each typed by
    `general` and by the learned model before it learned from it (`learned`: email key -> typing, from
    `Recalibrator.observe`; an email without one counts as the general model's typing), with a memory of
    `background` (text, label) and the other emails; serve the better fit where it is sure to save more than
    the unfitted setting (`unfitted`: the run's rule and threshold, at `UNFITTED_WEIGHTS` with
    `UNFITTED_MODEL`), else that setting (module doc). Returns the setting with what it scored: saved share,
    wrong per 100 words, whether within the cap, whether fitted, and the lower bound of the fit's gain."""
    typed_ones, others = emails[-held:], emails[:-held]
    memory = build_memory(background, None)
    memory.max_words = max_words  # as the page asks: to the end of the sentence, at most max_words
    for e in others:
        memory.add_body(e.body, sent_label(e))
    by_general = type_emails(general, tokenizer, [prompt_text(e.subject, e.body) for e in typed_ones], words=words,
                             max_words=max_words, sentence=True)
    kept = [(learned or {}).get(e.key()) for e in typed_ones]
    by_learned = [k if k is not None else g for k, g in zip(kept, by_general)]
    typings = {name: with_source(typed, memory.source, lambda _, prompt: memory.propose(prompt))
               for name, typed in ((LEARNED, by_learned), (GENERAL, by_general))}
    rule, threshold = unfitted
    row = fit_served(typings, (UNFITTED_MODEL, threshold, UNFITTED_WEIGHTS), DEFAULT_RULE, max_wrong_per_100,
                     FIT_GRID, default_rule=rule)
    weights = {**UNFITTED_WEIGHTS, **row["weights"]}
    return {"rule": row["rule"], "threshold": float(row["threshold"]), "weights": weights, "model": row["model"],
            "fitted": bool(row["fitted"]), "gain_low": row["gain_low"],
            "emails": len(emails), "typed": len(typed_ones), "held_out": sum(k is not None for k in kept),
            "saved": row.get("saved"), "wrong_per_100_words": row.get("wrong_per_100_words"),
            "within_cap": bool(row.get("within_cap")), "saved_by_model": row["saved_by_model"], "t": time.time()}


def load_served(store: PersonalStore) -> dict[str, Any] | None:
    """The setting fitted before (served.json), None when there is none or it cannot be read."""
    path = store.folder / SERVED
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = (isinstance(data, dict) and data.get("rule") in VALUE_RULES and isinstance(data.get("threshold"), float)
          and isinstance(data.get("weights"), dict) and data.get("model", LEARNED) in (LEARNED, GENERAL))
    return data if ok else None


def load_typed(store: PersonalStore, words: int, max_words: int) -> dict[str, TypedEmail]:
    """The typings kept before (typed.json) when they were typed as asked now; {} when there are none."""
    try:
        data = json.loads((store.folder / TYPED).read_text(encoding="utf-8"))
        if data.get("words") != words or data.get("max_words") != max_words:
            return {}
        return {str(k): TypedEmail.from_json(v) for k, v in data["emails"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


class Recalibrator:
    """The idle task that refits the served setting and model (module doc): `due()`, then `run()`; and what
    types each new email with the learned model before it learns from it: `observe(email, model)`.

    `general` is the run's model as loaded (copied: the model thread may be serving it); `on_fitted(setting)`
    applies a new setting; `background` is --memory's mail; `unfitted` the run's rule and threshold."""

    def __init__(self, general: nn.Module, tokenizer: Tokenizer, store: PersonalStore,
                 background: list[tuple[str, str]], on_fitted: Callable[[dict[str, Any]], None], *,
                 unfitted: tuple[str, float], min_emails: int = MIN_EMAILS, every: int = EVERY, held: int = HELD,
                 words: int = WORDS, max_words: int = MAX_SENTENCE_WORDS) -> None:
        self.general = copy.deepcopy(general).eval()
        self.unfitted = unfitted
        self.tokenizer, self.store, self.background = tokenizer, store, background
        self.on_fitted = on_fitted
        self.min_emails, self.every, self.held, self.words, self.max_words = min_emails, every, held, words, max_words
        self.last = load_served(store)
        self.typed = load_typed(store, words, max_words)
        self.failed: str | None = None

    def observe(self, email: SentEmail, model: nn.Module) -> None:
        """Type `email` with `model` (eval mode, not yet learned from it) and keep the typing, the newest
        2 x `held` of them (typed.json); a failure is said in `failed` and ends the refits."""
        if self.failed is not None:
            return
        try:
            self.typed[email.key()] = type_emails(model, self.tokenizer, [prompt_text(email.subject, email.body)],
                                                  words=self.words, max_words=self.max_words, sentence=True)[0]
            for key in list(self.typed)[:-2 * self.held]:  # oldest first: dicts keep insertion order
                del self.typed[key]
            data = {"words": self.words, "max_words": self.max_words,
                    "emails": {k: t.to_json() for k, t in self.typed.items()}}
            self.store.write_file(TYPED, json.dumps(data).encode("utf-8"))
        except Forgotten:
            self.typed = {}  # the learner drops what it learned and stops
        except Exception as exc:  # noqa: BLE001 (reported by /health; serving goes on with the setting it has)
            self.failed = f"{type(exc).__name__}: {exc}"

    def due(self) -> bool:
        """Enough sent emails, and enough new ones since the last fit."""
        count = len(self.store)
        fitted = int(self.last["emails"]) if self.last is not None else 0
        return self.failed is None and count >= self.min_emails and (self.last is None or count - fitted >= self.every)

    def run(self) -> dict[str, Any] | None:
        """Fit, keep (served.json, 0600) and apply a new setting; None when it failed (said in `failed`)."""
        try:
            setting = fit_on_sent(self.general, self.tokenizer, self.store.emails(), self.background,
                                  unfitted=self.unfitted, learned=self.typed, held=self.held, words=self.words,
                                  max_words=self.max_words)
            self.store.write_file(SERVED, (json.dumps(setting, indent=1) + "\n").encode("utf-8"))
        except Exception as exc:  # noqa: BLE001 (reported by /health; serving goes on with the setting it has)
            self.failed = f"{type(exc).__name__}: {exc}"
            return None
        self.last = setting
        self.on_fitted(setting)
        return setting
