"""The model side of the server: one suggestion for one keystroke, reusing the writer's session state.

`CompletionEngine.complete(prefix, subject, session, ...)` builds the prompt exactly as the model saw
emails in training (`subject`, a blank line, the body so far; `seqlab.data.mail.records.Email.text`),
encodes it through the session's `PromptEncoder` (only the new tokens run through the model), then
decodes from a copy of that state (`IncrementalDecoder.resume`) with `complete_encoded`, the same code
`seqlab complete` runs. Beside the model, the person's memory (`generation.memory.WritingMemory`: their
own earlier mail, filled by the app from the personal store and `--memory`, and at every sent email) and,
for a reply, the message being answered (`generation.reply_copy`) propose too; the proposal worth the most
expected saved characters after the blend weights wins (`generation.sources`). The engine's rule and
threshold (`seqlab.generation.gate`: from calibration.json, else `--min-confidence` as a first-word
probability) then decide whether it is shown; a withheld suggestion is an empty text. A request's own
`min_confidence` is a first-word probability. The answer names its source; which email a memory
suggestion came from is kept for the why panel only (`explained`).

A session is a name under which one writer's encoded prompt is kept (`SessionStore`); the HTTP routes
issue the names (`new_session_id`) and keep each caller's apart, so here any string will do.

Not thread-safe on purpose: the app runs every call on one worker thread with a fixed torch thread count
(the memory alone takes a lock: emails are added to it from the intake of sent mail).
"""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from seqlab.data.mail.reader import original_text
from seqlab.data.tokenizer import Tokenizer
from seqlab.generation.complete import Completion, complete_encoded, encode_prompt
from seqlab.generation.decode import IncrementalDecoder, context_limit, model_device
from seqlab.generation.gate import FIRST_WORD, check_rule
from seqlab.generation.memory import WritingMemory
from seqlab.generation.reply import reads_context, reply_context
from seqlab.generation.reply_copy import ReplyCopy
from seqlab.generation.sources import MODEL, choose, gate
from seqlab.models.context_encoder import ContextBatch
from seqlab.serving.sessions import MAX_SESSION_BYTES, PromptEncoder, SessionStore

MAX_EXPLAINED = 512  # suggestions whose source the why panel can still be told


@dataclass
class Suggestion:
    """What `/v1/complete` answers (see `seqlab.serving.app`)."""

    id: str
    text: str  # to insert after the body typed so far; "" when withheld
    confidence: float  # probability of the first word
    words: int
    latency_ms: float  # model time for this call: encoding the new tokens and decoding the suggestion
    reused_tokens: int  # prompt tokens whose state came from the session instead of the model
    cut_chars: int  # characters of the prompt cut from the left: the model's window cannot hold them
    threshold: float  # what a suggestion needed to be shown: a probability, or characters under expected-chars
    source: str = MODEL  # who proposed it: "model", "memory" (the person's earlier mail), "reply" (the original)
    origin: str | None = None  # for "memory": which email (kept by the engine for the why panel, never answered)

    # what a caller is told: not reused_tokens, which would let a prober who knew a session's name read
    # its text token by token (the server counts it in its own stats instead), nor origin
    PUBLIC = ("id", "text", "confidence", "words", "latency_ms", "cut_chars", "threshold", "source")

    def to_dict(self) -> dict[str, Any]:
        """The public fields (`PUBLIC`), plain values: asdict's deep copy costs more at every keystroke."""
        return {k: getattr(self, k) for k in self.PUBLIC}


def new_session_id() -> str:
    """An unguessable session name (128 random bits)."""
    return secrets.token_urlsafe(16)


def context_digest(context: ContextBatch | None) -> str | None:
    """A digest of a context's ids: a kept state holds that context's keys and values, so a session's
    state is reused only for the same original."""
    if context is None:
        return None
    return hashlib.blake2b(context.ids[context.keep].cpu().numpy().tobytes(), digest_size=8).hexdigest()


def prompt_text(subject: str, body: str) -> str:
    """The training text of an email so far: subject, blank line, body (lone surrogates replaced)."""
    text = f"{subject}\n\n{body}"
    return text.encode("utf-8", errors="replace").decode("utf-8")


class CompletionEngine:
    """Suggestions from one model for many writers, each with a kept state (at most `max_sessions`)."""

    def __init__(self, model: nn.Module, tokenizer: Tokenizer, *, threshold: float = 0.0,
                 max_sessions: int = 256, max_session_bytes: int = MAX_SESSION_BYTES, rule: str = FIRST_WORD) -> None:
        check_rule(rule, threshold)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.threshold, self.rule = threshold, rule
        self.encoder = PromptEncoder(model)
        self.sessions = SessionStore(max_sessions, max_session_bytes)
        self.device = model_device(model)
        # each token's bytes, looked up by id: the cut of a long prompt joins thousands at every keystroke
        self._bytes = [tokenizer.token_bytes(i) for i in range(tokenizer.vocab_size)]
        # the person's own writing and the message being answered, proposing beside the model; a source's
        # blend weight rescales its confidences before the best proposal is chosen (`generation.sources`)
        self.memory = WritingMemory()
        self.memory_emails: list[tuple[str, str]] = []  # (text, label) of --memory's emails, kept to rebuild it
        self.reply = ReplyCopy()
        self.weights: dict[str, float] = {"memory": 1.0, "reply": 1.0}
        self.explained: OrderedDict[str, tuple[str, str | None]] = OrderedDict()  # id -> (source, origin)

    def complete(self, prefix: str, subject: str = "", session: str | None = None, *, max_words: int = 3,
                 min_confidence: float | None = None, beam: int = 1, context: str | None = None,
                 sentence: bool = False) -> Suggestion:
        """A suggestion of up to `max_words` words after `prefix` (the body so far); `context` is the
        message being answered (a model trained with cross-attention reads it; `reads_context`). With
        `sentence` it runs to the end of its sentence or line, `max_words` a cap (`complete_encoded`'s
        sentence and value_stop: the rule still picks how much of it to show)."""
        start = time.perf_counter()
        threshold = self.threshold if min_confidence is None else min_confidence
        rule = self.rule if min_confidence is None else FIRST_WORD
        ids, allowed, skip = encode_prompt(self.tokenizer, prompt_text(subject, prefix))
        original = original_text(context.encode("utf-8", "replace")) if context else None
        # the model reads the original only if trained to; the reply copier reads it whatever the model
        ctx = reply_context(self.model, self.tokenizer, original) if self.reads_context else None
        digest = context_digest(ctx)
        previous = self.sessions.get(session) if session else None
        if previous is not None and previous.context != digest:
            previous = None  # the state read another original: start again
        encoded, reused = self.encoder.encode(ids, previous, ctx)
        encoded.context = digest
        if session:
            self.sessions.put(session, encoded)
        window = torch.tensor([encoded.ids], dtype=torch.long, device=self.device)  # (1, W)
        # the decoder slides only a window the model itself is bounded by; a recurrent model's state just
        # goes on from the prompt's tail (`serve_limit` bounds only what the prompt feeds it)
        decoder = IncrementalDecoder.resume(self.model, window, encoded.state, encoded.logits,
                                            context_limit(self.model), context=ctx, fast=self.encoder.fast)
        model = complete_encoded(self.model, self.tokenizer, ids, allowed, skip, max_words=max_words, beam=beam,
                                 threshold=None, decoder=decoder, rule=rule, sentence=sentence, value_stop=sentence)
        c = gate(self.choose(model, prompt_text(subject, prefix), original, max_words), rule, threshold)
        suggestion = Suggestion(
            id=uuid.uuid4().hex, text=c.text, confidence=c.confidence, words=len(c.words),
            latency_ms=1000 * (time.perf_counter() - start), reused_tokens=reused,
            cut_chars=self._cut_chars(ids, encoded.start), threshold=threshold, source=c.source, origin=c.origin)
        if c.text:
            self.explained[suggestion.id] = (c.source, c.origin)
            while len(self.explained) > MAX_EXPLAINED:
                self.explained.popitem(last=False)
        return suggestion

    def choose(self, model: Completion, prompt: str, context: str | None, max_words: int) -> Completion:
        """The model's proposal, the memory's and (with a context) the original's: the one worth the most
        expected saved characters after the blend weights (`generation.sources.choose`); the model's when
        none is worth anything."""
        others = [self.memory.propose(prompt, max_words=max_words)]
        if context:
            others.append(self.reply.propose(prompt, context, max_words=max_words))
        return choose([model, *others], self.weights) or model

    def replace_model(self, model: nn.Module) -> None:
        """Serve `model` from now on (the same tokenizer and vocabulary): learned weights swapped in whole.

        Call it where `complete` runs (the server's model thread), so no request is halfway through the old
        model; the kept sessions hold the old model's states and are dropped."""
        self.model = model.eval()
        self.encoder = PromptEncoder(model)
        self.sessions = SessionStore(self.sessions.max_sessions, self.sessions.max_bytes)

    def _cut_chars(self, ids: list[int], start: int) -> int:
        """Characters of the prompt before the window (ids[0] is bos, which stands for no text)."""
        if start <= 1:
            return 0
        cut = b"".join(map(self._bytes.__getitem__, ids[1:start]))
        return len(cut.decode("utf-8", errors="ignore"))

    @property
    def reads_context(self) -> bool:
        """Whether the model reads the message being answered (trained with a model.context)."""
        return reads_context(self.model)

    def describe(self) -> dict[str, Any]:
        """The model behind the suggestions, for `/health`."""
        cfg = getattr(self.model, "cfg", None)
        info: dict[str, Any] = {"params": sum(p.numel() for p in self.model.parameters()),
                                "tokenizer": self.tokenizer.kind, "vocab_size": self.tokenizer.vocab_size,
                                "context_limit": self.encoder.limit, "threshold": self.threshold,
                                "rule": self.rule}
        info["memory"] = {"emails": len(self.memory), "tokens": self.memory.tokens, "weights": dict(self.weights)}
        if cfg is not None:
            info.update(mixer=cfg.mixer, pos=cfg.pos, n_layer=cfg.n_layer, n_embd=cfg.n_embd, n_head=cfg.n_head,
                        block_size=cfg.block_size, cross_attention=cfg.reads_context)
        return info
