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
  (and the latest one before them), and the encoder feeds again from the latest copy at or before p.
- Every model sees a bounded tail of the prompt: attention its training window (`context_limit`), a
  recurrent model the last `RECURRENT_TAIL` tokens (`serve_limit`), so a request that starts from no kept
  state never feeds tens of thousands of tokens (a 64 KiB body) through the model. The window start
  moves in steps of half a window (`window_start`), a function of the prompt length alone, so the tokens
  the model sees, and thus the answer, are the same whether they were encoded now or reused from earlier
  keystrokes; between two steps every keystroke reuses the cache.

Memory is bounded per session and in total: the next-token logits are copied out of the model's (1, T, V)
output (a view would keep all of it alive), copies of a recurrent state are kept only over the dense tail
and once before it, and `SessionStore` drops the least recently used sessions past `max_sessions` or
`max_bytes` (the storage actually held, `held_bytes`).

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
from seqlab.generation.prefix_lanes import common_prefix
from seqlab.models.lm import map_tensors

SNAPSHOT_EVERY = 16  # tokens between kept copies of a recurrent state: a backspace re-feeds at most this many
DENSE_TAIL = 64  # copies are kept that densely only over the newest tokens; further back, only the latest
# Tokens of the prompt a recurrent model is fed at most: longer than most emails, and cheap enough for a GRU
# to read from scratch within a keystroke's budget; the state carries what came before the tail no further
# anyway.
RECURRENT_TAIL = 2048
MAX_SESSION_BYTES = 64 * 2**20  # all sessions' kept states together


def serve_limit(model: nn.Module) -> int:
    """The most prompt tokens the server feeds `model`: its context window, else RECURRENT_TAIL."""
    return context_limit(model) or RECURRENT_TAIL


def held_bytes(obj: Any) -> int:
    """Bytes of tensor storage `obj` keeps alive (each storage once; a view counts its whole storage)."""
    storages: dict[int, int] = {}

    def note(t: Tensor) -> Tensor:
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    map_tensors(obj, note)
    return sum(storages.values())


def window_start(n: int, limit: int | None) -> int:
    """Index of the first of `n` prompt tokens a model with context `limit` sees.

    0 while the prompt fits; then the smallest multiple of limit // 2 that leaves at most `limit` tokens,
    so the window holds between limit - limit // 2 and limit tokens and moves only every limit // 2."""
    if limit is None or n <= limit:
        return 0
    step = max(1, limit // 2)
    return -(-(n - limit) // step) * step




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
    context: str | None = None  # a digest of the context the state has encoded (None: no context)

    def nbytes(self) -> int:
        """Tensor storage this prompt keeps alive: its state, logits and snapshots."""
        return held_bytes((self.state, self.logits, list(self.snapshots.values())))


class PromptEncoder:
    """Encodes prompts for one model, reusing what an earlier encoding of the same session holds."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.limit = serve_limit(model)
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
                # a copy: the view out[:, -1] would keep the whole (1, T, V) output alive in the session
                logits = out[:, -1].to(torch.float32, copy=True)  # (1, V)
            done = end
            if not self.truncatable and done % SNAPSHOT_EVERY == 0:
                snapshots[done] = (state, logits)
        assert logits is not None
        return Encoded(list(window), start, state, logits, _pruned(snapshots, len(window)))


def _pruned(snapshots: dict[int, tuple[Any, Tensor]], n: int) -> dict[int, tuple[Any, Tensor]]:
    """The snapshots over the dense tail of an n-token window, and the latest one before it."""
    tail = n - DENSE_TAIL
    before = [k for k in snapshots if k < tail]
    keep = {k for k in snapshots if k >= tail} | ({max(before)} if before else set())
    return {k: snapshots[k] for k in sorted(keep)}


class SessionStore:
    """The encoded prompt of each session, least recently used dropped first once there are more than
    `max_sessions` or they hold more than `max_bytes` together (the newest is always kept)."""

    def __init__(self, max_sessions: int, max_bytes: int = MAX_SESSION_BYTES) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, not {max_sessions}")
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, not {max_bytes}")
        self.max_sessions, self.max_bytes = max_sessions, max_bytes
        self._items: OrderedDict[str, tuple[Encoded, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, session: str) -> Encoded | None:
        with self._lock:
            item = self._items.get(session)
            if item is None:
                return None
            self._items.move_to_end(session)
            return item[0]

    def __contains__(self, session: str) -> bool:
        with self._lock:
            return session in self._items

    def put(self, session: str, encoded: Encoded) -> None:
        size = encoded.nbytes()
        with self._lock:
            old = self._items.pop(session, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[session] = (encoded, size)
            self._bytes += size
            while len(self._items) > 1 and (len(self._items) > self.max_sessions or self._bytes > self.max_bytes):
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped

    @property
    def bytes(self) -> int:
        """Tensor storage held by all kept sessions (each session's own count; shared weights are not in it)."""
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
