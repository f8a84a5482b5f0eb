"""Context batches beside the token batches: for each window or stream lane, the context of its email.

The model reads a reply's context through cross-attention (`seqlab.models.context_encoder`); this module cuts
those contexts out of a split's `ContextStore` (`seqlab.data.context_store`) for the same rows as the token
batches of `batches.py` and `streams.py`:

- windows (attention): one context per row, the one of the email the window lies in, also when the
  window starts in the middle of the email (the email is found from the window's start offset);
- streams (recurrent, truncated BPTT): a lane's chunk may hold the end of one email and the start of
  the next, so a lane gets E contexts side by side and `segment` (B, T) says which one each position
  reads (-1 for padding).

Each context keeps its last `limit` tokens (model.ctx_block_size); an email without context gets an
all-padding one. Returned as `ContextRows` of tensors: `ids` (B, E, Lc) int64, `keep` (B, E, Lc) bool,
`segment` (B, T) int64 or None (every position reads context 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

if TYPE_CHECKING:
    from seqlab.data.context_store import ContextStore
    from seqlab.data.store import TokenStore
    from seqlab.data.streams import StreamSampler


class ContextRows(NamedTuple):
    """Contexts for one token batch (module docstring); `seqlab.models.context_encoder.ContextBatch(*rows)`."""

    ids: torch.Tensor
    keep: torch.Tensor
    segment: torch.Tensor | None = None


def gather_contexts(contexts: ContextStore, emails: np.ndarray, limit: int) -> tuple[torch.Tensor, torch.Tensor]:
    """emails (B, E) email indices (-1: none) -> ids (B, E, Lc) int64 and keep (B, E, Lc) bool, Lc >= 1."""
    emails = np.asarray(emails, dtype=np.int64)
    valid = emails >= 0
    e = np.where(valid, emails, 0)
    hi = np.where(valid, contexts.ends[e], 0)  # (B, E)
    lo = np.where(valid, np.maximum(contexts.starts[e], hi - limit), 0)  # the last `limit` tokens
    n = hi - lo  # (B, E) tokens kept
    width = max(1, int(n.max()) if n.size else 1)
    offs = np.arange(width)
    keep = offs[None, None, :] < n[:, :, None]  # (B, E, Lc)
    pos = np.where(keep, lo[:, :, None] + offs[None, None, :], 0)
    ids = np.where(keep, np.asarray(contexts.tokens[pos]) if len(contexts.tokens) else 0, 0).astype(np.int64)
    return torch.from_numpy(ids), torch.from_numpy(keep)


def window_contexts(store: TokenStore, starts: np.ndarray, limit: int) -> ContextRows:
    """One context per window, from the windows' global start offsets (B,)."""
    assert store.contexts is not None
    email = np.searchsorted(store.starts, np.asarray(starts), side="right") - 1  # (B,) email of each window
    ids, keep = gather_contexts(store.contexts, email[:, None], limit)
    return ContextRows(ids, keep)


def stream_contexts(sampler: StreamSampler, step: int, limit: int) -> ContextRows:
    """The contexts of `sampler.batch(step)`: E per lane, and the segment each position reads."""
    store = sampler.store
    assert store.contexts is not None
    epoch, chunk = sampler.position(step)
    T, n = sampler.block_size, store.num_tokens
    cum, _ = sampler._layout(epoch)
    order = sampler.epoch_order(epoch)
    lane_start, lane_end = sampler.lane_start[sampler.rows], sampler.lane_end[sampler.rows]  # this shard's lanes
    q = lane_start[:, None] + chunk * T + np.arange(T)[None, :]  # (B, T) stream positions
    in_lane = q < lane_end[:, None]
    j = np.searchsorted(cum, np.minimum(q, n - 1), side="right") - 1  # (B, T) ordered email of each position
    segment = np.where(in_lane, j - j[:, :1], -1)  # (B, T): 0 for the lane's first email in the chunk, ...
    e = int(segment.max()) + 1 if segment.size else 1
    slots = j[:, :1] + np.arange(max(e, 1))[None, :]  # (B, E) ordered email of each context slot
    used = slots <= np.where(in_lane, j, -1).max(axis=1, keepdims=True)
    emails = np.where(used, order[np.minimum(slots, len(order) - 1)], -1)
    ids, keep = gather_contexts(store.contexts, emails, limit)
    return ContextRows(ids, keep, torch.from_numpy(segment.astype(np.int64)))
