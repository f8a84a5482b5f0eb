"""Per-writer model state for the autocomplete server: encode only what was typed since the last keystroke.

A writer's email grows one keystroke at a time. Running the model over the whole email at every keystroke
costs time linear in its length; a sticky server (as in Gmail Smart Compose, Chen et al. 2019, section 5)
keeps, per session, the model state after the text it has already encoded and feeds only the new tokens.

`PromptEncoder.encode(ids, previous)` returns an `Encoded` prompt (the tokens in the window, the state
after them and the next-token logits) and how many tokens it reused:

- The prompt's token ids are compared with the session's previous ones; the longest common prefix p is
  reused. Typing extends the text (p = all of the previous tokens): only the new tokens are fed.
- An edit or a backspace (p shorter than the previous tokens) goes back to p. An attention state is its
  key/value cache, and a prefix's cache is a prefix of the cache (`LMState.truncated`); a recurrent
  state cannot be rewound, so a copy is kept every `SNAPSHOT_EVERY` tokens over the newest `DENSE_TAIL`
  (and one where each earlier feed stopped), and the encoder feeds again from the latest copy at or before p.
- A model with a bounded context (attention: its training window, `context_limit`) sees the last tokens
  of the prompt only. The window start moves in steps of half a window (`window_start`), a function of
  the prompt length alone, so the tokens the model sees, and thus the answer, are the same whether they
  were encoded now or reused from earlier keystrokes; between two steps every keystroke reuses the cache.

The answer from a reused state equals the answer from scratch up to float rounding (the same tokens go
through the same model, split into different chunks); the tests check the suggestions are equal.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.generation.decode import context_limit, model_device
from seqlab.generation.fast_step import FastStep

SNAPSHOT_EVERY = 16  # tokens between kept copies of a recurrent state: a backspace re-feeds at most this many
DENSE_TAIL = 64  # copies are kept that densely only over the newest tokens; further back, one per feed


def window_start(n: int, limit: int | None) -> int:
    """Index of the first of `n` prompt tokens a model with context `limit` sees.

    0 while the prompt fits; then the smallest multiple of limit // 2 that leaves at most `limit` tokens,
    so the window holds between limit - limit // 2 and limit tokens and moves only every limit // 2."""
    if limit is None or n <= limit:
        return 0
    step = max(1, limit // 2)
    return -(-(n - limit) // step) * step


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two id lists."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


@dataclass
class Encoded:
    """A prompt run through the model: what the next keystroke can reuse.

    ids: the tokens inside the window (the prompt's ids from `start` on); state and logits (1, V): the
    model state and next-token logits after them; snapshots: for recurrent models, a copy of (state,
    logits) after the first n ids for n = SNAPSHOT_EVERY, 2 * SNAPSHOT_EVERY, ...
    """

    ids: list[int]
    start: int
    state: Any
    logits: Tensor
    snapshots: dict[int, tuple[Any, Tensor]] = field(default_factory=dict)


class PromptEncoder:
    """Encodes prompts for one model, reusing what an earlier encoding of the same session holds."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.limit = context_limit(model)
        cfg = getattr(model, "cfg", None)
        # every layer attention: the state can be truncated instead of copied (see the module docstring)
        self.truncatable = cfg is not None and cfg.mixer == "attention"
        self.device = model_device(model)
        self.fast = FastStep.of(model)  # a keystroke usually adds one token: the decoder's one-token step

    def encode(self, ids: list[int], previous: Encoded | None = None, context: Any = None) -> tuple[Encoded, int]:
        """(the encoded prompt `ids`, how many of its window's tokens were reused from `previous`).

        `context` (a ContextBatch: the message being answered) is read when the model starts from no
        state; a reused state keeps its encoded context, so a session must be keyed by its context too
        (`CompletionEngine`)."""
        if not ids:
            raise ValueError("a prompt holds at least one token (the bos token)")
        start = window_start(len(ids), self.limit)
        window = ids[start:]
        base, reused = self._reusable(window, start, previous)
        with torch.inference_mode():
            encoded = self._feed(window, start, base, context)
        return encoded, reused

    def _reusable(self, window: list[int], start: int, previous: Encoded | None) -> tuple[Encoded | None, int]:
        """The longest part of `previous` that `window` begins with, as an Encoded prefix (or None)."""
        if previous is None or previous.start != start:
            return None, 0
        p = common_prefix(previous.ids, window)
        if p == len(previous.ids):
            return previous, p
        kept = {n: s for n, s in previous.snapshots.items() if n <= p}
        if self.truncatable and p >= 2:
            # go back to p - 1 tokens, so at least one token is fed and gives the logits after p
            q = p - 1
            return Encoded(window[:q], start, previous.state.truncated(q), previous.logits, kept), q
        if kept:
            q = max(kept)
            state, logits = kept[q]
            return Encoded(window[:q], start, state, logits, kept), q
        return None, 0

    def _chunk_ends(self, done: int, n: int) -> list[int]:
        """Where to stop while feeding tokens done..n: once at the end for attention; for a recurrent model
        also at every multiple of SNAPSHOT_EVERY within the last DENSE_TAIL tokens (where edits happen)
        and at the last multiple before them, so a long prompt still runs through the model in few calls."""
        if done >= n:
            return []
        if self.truncatable:
            return [n]
        marks = range((done // SNAPSHOT_EVERY + 1) * SNAPSHOT_EVERY, n, SNAPSHOT_EVERY)
        tail = [m for m in marks if m >= n - DENSE_TAIL]
        head = [m for m in marks if m < n - DENSE_TAIL][-1:]
        return [*head, *tail, n]

    def _feed(self, window: list[int], start: int, base: Encoded | None, context: Any = None) -> Encoded:
        """Feed window[len(base.ids):] after `base` (all of window when base is None)."""
        done = len(base.ids) if base is not None else 0
        state = base.state if base is not None else None
        logits = base.logits if base is not None else None
        snapshots = dict(base.snapshots) if base is not None else {}
        for end in self._chunk_ends(done, len(window)):
            idx = torch.tensor([window[done:end]], dtype=torch.long, device=self.device)  # (1, T)
            if end - done == 1 and self.fast is not None and self.fast.usable(state):
                logits, state = self.fast(idx[:, 0], state)  # (1, V)
                logits = logits.float()
            else:
                extra = {"context": context} if context is not None and state is None else {}
                out, state = self.model(idx, state=state, **extra)  # (1, T, V)
                logits = out[:, -1].float()  # (1, V)
            done = end
            if not self.truncatable and done % SNAPSHOT_EVERY == 0:
                snapshots[done] = (state, logits)
        assert logits is not None
        return Encoded(list(window), start, state, logits, snapshots)


class SessionStore:
    """The encoded prompt of each session, least recently used dropped first (memory stays bounded)."""

    def __init__(self, max_sessions: int) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, not {max_sessions}")
        self.max_sessions = max_sessions
        self._items: OrderedDict[str, Encoded] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session: str) -> Encoded | None:
        with self._lock:
            item = self._items.get(session)
            if item is not None:
                self._items.move_to_end(session)
            return item

    def put(self, session: str, encoded: Encoded) -> None:
        with self._lock:
            self._items[session] = encoded
            self._items.move_to_end(session)
            while len(self._items) > self.max_sessions:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
