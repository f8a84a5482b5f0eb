"""The typing passes of the replay (`seqlab.bench.replay`) and the settings they are scored at.

A person's mail is typed once per model state, and every lever of the ablation is then a replay over the
kept proposals (`seqlab.evaluation.typing_sim.simulate`), not another pass:

- `frozen_pass`: the general model's greedy proposals at every asked position of every email, up to the end
  of a sentence or line (`max_words` a cap), one batched call (`generation.batched.propose_positions`);
- `learned_pass`: the same with learning on: each email is typed by the weights the server's `Learner` would
  have swapped in after the emails before it were sent (what an idle server does: `passes` steps);
- `add_memory`: each position also gets the person's memory's proposal, the memory holding only the emails
  sent BEFORE this one (the memory of a new user grows as they send), and `add_reply` the copy of the
  message being answered (the email's context, read from the DATA_DIR's contexts);
- `limited` and `without` give the shorter and single-source variants by cutting the kept proposals: a
  greedy proposal of up to 3 words is the first 3 words of the longer one (the decode is the same until it
  stops, and the confidences of a prefix do not depend on what follows);
- `online_settings`: a model, threshold and memory weight per person, fitted before each email on the emails
  the person typed before it (`evaluation.saved_fit.fit_served`: the best fit under the cap, for the learned
  model and the general one, served only where it is sure to save more than the unfitted setting), the
  unfitted setting until `min_emails` are there: what a server recalibrating on the person's own sent mail
  would show (`serving.recalibrate`).
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from torch import nn

from seqlab.data.context_store import open_contexts
from seqlab.data.store import TokenStore, load_meta
from seqlab.data.tokenizer import Tokenizer
from seqlab.evaluation.dynamic import split_metadata
from seqlab.evaluation.saved_chars import collect_typing, with_source
from seqlab.evaluation.saved_fit import GAIN_QUANTILE, fit_served
from seqlab.evaluation.typing_sim import MODEL, Boundary, Candidate, TypedEmail
from seqlab.generation.batched import propose_positions
from seqlab.generation.complete import Completion
from seqlab.generation.gate import word_ends
from seqlab.generation.memory import WritingMemory
from seqlab.generation.reply_copy import ReplyCopy
from seqlab.serving.learner import Learner, LearnSettings
from seqlab.serving.personal import PersonalStore, SentEmail

MEMORY, REPLY = "memory", "reply"


@dataclass
class Person:
    """One person's mail in date order: each email's text (subject, blank line, body) and the text of the
    message it answers ('' when none)."""

    name: str
    emails: list[str]
    contexts: list[str]


def person_mail(data_dir: Path, tokenizer: Tokenizer, splits: Sequence[str], limit: int | None = None) -> Person:
    """A person's emails in `splits` of their DATA_DIR, in date order (undated ones last), with the text
    each one answers. The general model saw none of them, so all of a person's mail can be replayed."""
    meta = load_meta(data_dir)
    dated: list[tuple[bool, float, int, str, str]] = []
    for split in splits:
        store = TokenStore(data_dir, split)
        contexts = open_contexts(data_dir, split, store.num_emails, meta)
        for m in split_metadata(data_dir, split, store.num_emails):
            ids = [t for t in store.email(m.index).tolist() if not tokenizer.is_special(t)]
            ctx = contexts.context(m.index).tolist() if contexts is not None else []
            dated.append((m.date is None, m.date or 0.0, len(dated), tokenizer.decode(ids),
                          tokenizer.decode([t for t in ctx if not tokenizer.is_special(t)])))
    dated.sort()
    kept = dated[:limit] if limit is not None else dated
    return Person(data_dir.name, [d[3] for d in kept], [d[4] for d in kept])


def _model_proposer(model: nn.Module, tokenizer: Tokenizer, max_words: int) -> Callable[..., list[list[Completion]]]:
    def proposals(texts: Sequence[str], positions: Sequence[Sequence[int]],
                  contexts: Sequence[Any] | None) -> list[list[Completion]]:
        return propose_positions(model, tokenizer, texts, positions, max_words=max_words, sentence=True)

    return proposals


def frozen_pass(model: nn.Module, tokenizer: Tokenizer, person: Person, *, words: int, max_words: int,
                ask: str) -> list[TypedEmail]:
    """The general model's proposals at every asked position of every email of `person`."""
    return collect_typing(person.emails, _model_proposer(model, tokenizer, max_words), words=words, ask=ask)


def learned_pass(model: nn.Module, tokenizer: Tokenizer, person: Person, *, words: int, max_words: int, ask: str,
                 settings: LearnSettings | None = None) -> list[TypedEmail]:
    """Each email typed by the weights learned from the emails sent before it (the server's own `Learner`,
    in process, so the comparison is of what is learned, not of when an idle second comes)."""
    settings = settings or LearnSettings()
    out: list[TypedEmail] = []
    with tempfile.TemporaryDirectory() as folder:
        learner = Learner(model, tokenizer, PersonalStore(folder), idle=lambda: True, on_swap=lambda m: None,
                          settings=settings)
        current = model
        for text in person.emails:
            out += collect_typing([text], _model_proposer(current, tokenizer, max_words), words=words, ask=ask)
            subject, _, body = text.partition("\n\n")
            for _ in range(settings.passes):  # what an idle server does with the email just sent
                learner.step(SentEmail(subject, body))
            current = copy.deepcopy(learner.model).eval()
    return out


def add_memory(typed: Sequence[TypedEmail], person: Person) -> list[TypedEmail]:
    """`typed` with the person's memory's proposals, the memory holding the emails before each one."""
    memory = WritingMemory()
    added = 0

    def propose(e: int, prompt: str) -> Completion | None:
        nonlocal added
        while added < e:  # sent before email e: in the memory when e is typed
            memory.add(person.emails[added], f"email {added}")
            added += 1
        return memory.propose(prompt)

    return with_source(typed, MEMORY, propose)


def add_reply(typed: Sequence[TypedEmail], person: Person) -> list[TypedEmail]:
    """`typed` with copies from the message each email answers (none where it answers nothing)."""
    copier = ReplyCopy()
    return with_source(typed, REPLY, lambda e, prompt: copier.propose(prompt, person.contexts[e] or None))


def _cut(c: Candidate, max_words: int) -> Candidate:
    ends = word_ends(c.text)
    if len(ends) <= max_words:
        return c
    return replace(c, text=c.text[:ends[max_words - 1]], word_confidences=c.word_confidences[:max_words])


def limited(typed: Sequence[TypedEmail], max_words: int, sources: Sequence[str] | None = None) -> list[TypedEmail]:
    """`typed` with every proposal cut to its first `max_words` words, and only `sources` kept (all by
    default; the model's always)."""
    keep = None if sources is None else {MODEL, *sources}
    out = []
    for email in typed:
        found = [Boundary(b.offset, {s: _cut(c, max_words) for s, c in b.proposals.items()
                                     if keep is None or s in keep}) for b in email.boundaries]
        out.append(TypedEmail(email.text, email.start, email.end, found))
    return out


def online_settings(typings: Mapping[str, Sequence[TypedEmail]], rule: str,
                    default: tuple[str, float, Mapping[str, float]], cap: float, *, min_emails: int = 5,
                    every: int = 5, window: int | None = None,
                    weight_grid: Mapping[str, Sequence[float]] | Sequence[float] | None = None,
                    quantile: float = GAIN_QUANTILE) -> list[tuple[str, float, dict[str, float]]]:
    """(typing, threshold, weights) for each email: `typings` are the same emails typed by each model the
    server may serve (the learned one first); before each email, once `min_emails` were typed and again
    every `every` emails (a server refits as the sent mail grows, not at every email), `fit_served` on the
    emails before it (the newest `window` of them, all when None) chooses between the best fit within `cap`
    wrong per 100 words and `default` (model, threshold, weights), as `serving.recalibrate` does; until
    then `default`."""
    count = len(next(iter(typings.values())))
    out: list[tuple[str, float, dict[str, float]]] = []
    setting = (default[0], default[1], dict(default[2]))
    for e in range(count):
        if e >= min_emails and (e - min_emails) % every == 0:
            lo = 0 if window is None else max(0, e - window)
            row = fit_served({name: typed[lo:e] for name, typed in typings.items()}, default, rule, cap,
                             weight_grid, quantile)
            setting = (row["model"], float(row["threshold"]), dict(row.get("weights") or {}))
        out.append(setting)
    return out
