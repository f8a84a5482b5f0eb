"""How held-out scoring cuts a split into forward calls: windows, sliding lanes, or recurrent lanes.

Every plan scores every target of the split exactly once, and every target is predicted from tokens of
its own email only (an email is `[bos] + text + [eos]`; its targets are `text + [eos]`). A model that
reads reply contexts (a `model.context` other than none) gets each email's context beside its tokens. The plan is
chosen from the model (`plan_kind`):

- `lanes` (recurrent models: no context limit, `seqlab.generation.decode.context_limit`): emails are
  the batch lanes, each read from its first token to its last in chunks, the hidden state carried from
  chunk to chunk, so a target sees its whole email before it and the result depends neither on the
  chunk length nor on the lane count.
- `sliding` (attention with positions that depend on distance only: none, rope, alibi): emails are lanes
  too; each chunk of C = W // 2 tokens (W = block_size) attends causally to itself and to the keys and
  values of the W - C inputs before it, held in a `seqlab.models.kv_cache.RingKVCache` (a preallocated
  ring: each call writes only its own C keys; `SlidingKVCache` is the concatenating reference). So target t
  reads the keys of inputs max(0, t // C * C - (W - C))..t: its whole prefix within the email's first W
  tokens (C divides W), later at least W - C = W/2 inputs, as the windows give, and never more than W (the
  training window). The keys held in deeper layers were computed when their own chunk was read, from their
  own W - C inputs before, so information from further back in the email reaches a target through them, as
  in Transformer-XL's segment recurrence (Dai et al. 2019, section 3.2); a fresh window would recompute
  them from the window alone, as the decoder does when its window is full (`seqlab.generation.decode`).
  Nothing is computed twice. That reach beyond the training window costs a little against the windows,
  and smaller chunks (more held keys: C = W/4, W/8) scored worse still, so C = W/2, also the fastest (the
  experiments index has the figures).
- `windows` (learned or sinusoidal positions, whose keys carry absolute positions that cannot slide):
  windows of W tokens inside one email overlapping by half (`seqlab.data.batches.eval_windows`,
  stride W // 2); each window after an email's first scores only targets no earlier window scored,
  so every such target sees at least W/2 tokens. The last window is aligned to the email's end.

Lanes are emails sorted by length (stable) in groups; when the shortest lanes of a group have ended,
later chunks drop them (`Chunk.carry` names the lanes kept), so padding costs at most one chunk per
email. A call holds about batch_size * block_size positions, as a training batch does (its logits are
the memory that matters): more lanes when the chunks are shorter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from seqlab.data.batches import IGNORE_INDEX, eval_windows, gather_windows
from seqlab.data.reply_batches import gather_contexts, window_contexts
from seqlab.data.store import TokenStore
from seqlab.generation.decode import context_limit
from seqlab.models.context_encoder import ContextBatch
from seqlab.models.kv_cache import RingKVCache
from seqlab.models.lm import LM, LMState

DISTANCE_POSITIONS = ("none", "rope", "alibi")  # positions a sliding key/value cache keeps valid
SLIDE_DIVISOR = 2  # sliding chunks of W // 2 tokens: later targets read at least W/2 inputs (module docstring)
LANE_CHUNK = 32  # recurrent chunk length; more lanes per call instead (module docstring)


class Chunk(NamedTuple):
    """One forward call of held-out scoring.

    first: the lanes start here (a fresh state; otherwise the previous call's state is carried);
    x, y: (B, T) int64 inputs and targets, y = IGNORE_INDEX where nothing is scored;
    context: the rows' reply contexts (a ContextBatch with B lanes) or None; for lanes given with the
        first chunk only (its keys and values stay in the state);
    emails: (B,) the email of each row, for per-email sums, or None;
    carry: (B,) int64, the lanes of the previous call's state these rows continue (finished lanes
        dropped), or None for all of them in order.
    """

    first: bool
    x: torch.Tensor
    y: torch.Tensor
    context: ContextBatch | None = None
    emails: np.ndarray | None = None
    carry: torch.Tensor | None = None


FreshState = Callable[[int, torch.device], Any]  # (lanes, device) -> the state a lane group starts from


@dataclass(frozen=True)
class Plan:
    """The calls that score a split, and the state each group of lanes starts from."""

    kind: str  # "lanes", "sliding" or "windows"
    chunks: Iterator[Chunk]
    fresh: FreshState


def plan_kind(model: nn.Module, slide: bool = True) -> str:
    """`lanes`, `sliding` or `windows` for this model (module docstring); `slide=False` keeps attention
    on the windows whatever its positions (to compare the two)."""
    if context_limit(model) is None:
        return "lanes"
    cfg = model.cfg
    if slide and isinstance(model, LM) and cfg.mixer == "attention" and cfg.pos in DISTANCE_POSITIONS:
        return "sliding"
    return "windows"


def slide_chunk(block_size: int) -> int:
    """Tokens per sliding chunk for window W: W // 2 (at least 1)."""
    return max(1, block_size // SLIDE_DIVISOR)


def sample_emails(store: TokenStore, targets: int, seed: int) -> np.ndarray:
    """Sorted indices of a fixed random sample of the emails of `store` holding about `targets` targets:
    emails are drawn in a random order from `seed` until their targets reach `targets` (at least one
    email with a target, all of them when the split holds fewer); the same sample for the same arguments."""
    n = np.maximum(store.lengths.astype(np.int64) - 1, 0)  # targets per email
    order = np.random.default_rng([seed]).permutation(len(n))
    order = order[n[order] > 0]
    take = int(np.searchsorted(np.cumsum(n[order]), targets, side="left")) + 1  # the email that reaches it
    return np.sort(order[:take])


def split_plan(model: nn.Module, store: TokenStore, block_size: int, batch_size: int, pad_id: int,
               limit: int = 0, slide: bool = True, emails: np.ndarray | None = None) -> Plan:
    """The plan for scoring every target of `store` once (of its `emails` only, when given); `limit` > 0
    gives each email its context's last `limit` tokens (model.ctx_block_size), 0 gives none; `slide` as
    in `plan_kind`."""
    if block_size < 1 or batch_size < 1:
        raise ValueError(f"block_size and batch_size must be positive, not {block_size} and {batch_size}")
    kind = plan_kind(model, slide)
    budget = batch_size * block_size  # positions per call, as in a training batch
    if kind == "windows":
        return Plan(kind, iter_windows(store, block_size, batch_size, pad_id, limit, emails), lambda b, d: None)
    if kind == "sliding":
        chunk = slide_chunk(block_size)
        keep = block_size - chunk
        n_layer = len(model.blocks)
        return Plan(kind, iter_lanes(store, max(1, budget // chunk), chunk, pad_id, limit, emails),
                    lambda b, d: sliding_state(n_layer, keep, b, d))
    chunk = min(block_size, LANE_CHUNK)
    return Plan(kind, iter_lanes(store, max(1, budget // chunk), chunk, pad_id, limit, emails), lambda b, d: None)


def sliding_state(n_layer: int, keep: int, lanes: int, device: torch.device) -> LMState:
    """A fresh LM state whose attention layers hold at most `keep` earlier positions each."""
    return LMState([RingKVCache(keep) for _ in range(n_layer)], [None] * n_layer,
                   torch.zeros(lanes, dtype=torch.long, device=device))


def iter_windows(store: TokenStore, block_size: int, batch_size: int, pad_id: int, limit: int,
                 emails: np.ndarray | None = None) -> Iterator[Chunk]:
    """Windows overlapping by half, `batch_size` a call, each standing alone (module docstring); those
    of `emails` only, when given."""
    start, length, skip = eval_windows(store, block_size, max(1, block_size // 2))
    email = np.searchsorted(store.starts, start, side="right") - 1  # (W,) email of each window
    if emails is not None:
        keep = np.isin(email, emails)
        start, length, skip, email = start[keep], length[keep], skip[keep], email[keep]
    for a in range(0, len(start), batch_size):
        sl = slice(a, a + batch_size)
        x, y = gather_windows(store.tokens, start[sl], length[sl], block_size, pad_id, skip[sl])
        context = ContextBatch(*window_contexts(store, start[sl], limit)) if limit else None
        yield Chunk(True, x, y, context, email[sl])


def iter_lanes(store: TokenStore, lanes: int, chunk: int, pad_id: int, limit: int,
               emails: np.ndarray | None = None) -> Iterator[Chunk]:
    """Whole emails as lanes (of `emails` only, when given), `lanes` at a time sorted by length, read
    `chunk` tokens a call; lanes whose email has ended are dropped from later calls (module docstring)."""
    lengths = store.lengths
    order = np.argsort(lengths, kind="stable")
    if emails is not None:
        order = order[np.isin(order, emails)]
    order = order[lengths[order] > 1]  # an email without a target has nothing to score
    for a in range(0, len(order), lanes):
        ids = order[a:a + lanes]  # (B,) ascending length
        n = lengths[ids].astype(np.int64) - 1  # (B,) targets per lane
        starts = store.starts[ids].astype(np.int64)
        context = ContextBatch(*gather_contexts(store.contexts, ids[:, None], limit)) if limit else None
        lo, live = 0, 0  # targets read so far; first lane not yet ended
        while lo < n[-1]:
            now = int(np.searchsorted(n, lo, side="right"))  # lanes with n <= lo have ended
            carry = None if lo == 0 or now == live else torch.arange(now - live, len(ids) - live)
            live = now
            width = min(chunk, int(n[-1]) - lo)
            offs = lo + np.arange(width + 1)  # (width+1,) offsets inside each email
            real = offs[None, :] <= n[live:, None]  # (B', width+1) positions inside the email
            pos = np.where(real, starts[live:, None] + offs[None, :], 0)  # padded slots read token 0
            w = np.asarray(store.tokens[pos]).astype(np.int64)  # (B', width+1)
            x = np.where(real[:, :-1], w[:, :-1], pad_id)  # (B', width) inputs w[:-1]
            y = np.where(real[:, 1:], w[:, 1:], IGNORE_INDEX)  # (B', width) targets, shifted by one
            yield Chunk(lo == 0, torch.from_numpy(x), torch.from_numpy(y), context if lo == 0 else None,
                        ids[live:], carry)
            lo += width
