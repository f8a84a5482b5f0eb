"""Every target of a split exactly once, as (x, y) batches: the evaluation iterators that evaluation's plans
(seqlab/evaluation/plans.py) replaced, kept as the reference the batch and stream tests hold the data side to.

- `iter_eval_windows`: windows for attention, laid out by `seqlab.data.batches.eval_windows`;
- `iter_eval_streams`: whole emails as lanes for a recurrent model, each read from its first token, so no
  lane starts inside an email with a fresh state and the score does not depend on T or B.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from seqlab.data.batches import IGNORE_INDEX, check_positive, eval_windows, gather_windows
from seqlab.data.store import TokenStore


def _check_stride(block_size: int, stride: int | None) -> None:
    if stride is not None and not 1 <= stride <= block_size:
        raise ValueError(f"the evaluation stride must be between 1 and block_size={block_size}, not {stride}")


def iter_eval_windows(store: TokenStore, block_size: int, batch_size: int, pad_id: int,
                      stride: int | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(x, y) batches over every window of the split, covering each target exactly once, in email order.

    `stride` < block_size overlaps the windows so that scored targets keep context (see `eval_windows`).
    The last batch may have fewer than `batch_size` rows.
    """
    check_positive(block_size=block_size, batch_size=batch_size)
    _check_stride(block_size, stride)
    start, length, skip = eval_windows(store, block_size, stride)
    for a in range(0, len(start), batch_size):
        sl = slice(a, a + batch_size)
        yield gather_windows(store.tokens, start[sl], length[sl], block_size, pad_id, skip[sl])


def iter_eval_streams(store: TokenStore, block_size: int,
                      batch_size: int, pad_id: int) -> Iterator[tuple[bool, torch.Tensor, torch.Tensor]]:
    """(first, x, y) held-out chunks with whole emails as lanes: every target of the split exactly once.

    Unlike `StreamSampler`, whose lanes may start inside an email, each batch takes `batch_size` emails
    of similar length (sorted by length, stable) and lane b reads its email from its first token: chunk
    k holds inputs email[kT : kT+T] and targets email[kT+1 : kT+T+1], x (B, width) and y (B, width)
    int64 with width <= T, padded (x with `pad_id`, y with IGNORE_INDEX) where the lane's email has
    ended. `first` is True for chunk 0 of a batch: start from a fresh hidden state there and carry it
    from chunk to chunk otherwise, so a recurrent model is scored as if it read each email whole, and
    the result depends neither on `block_size` nor on `batch_size`. An empty split yields nothing.
    """
    check_positive(block_size=block_size, batch_size=batch_size)
    lengths = store.lengths
    order = np.argsort(lengths, kind="stable")
    for a in range(0, len(order), batch_size):
        ids = order[a:a + batch_size]
        n_targets = lengths[ids] - 1  # (B,)
        longest = int(n_targets.max())
        for k in range(-(-longest // block_size)):
            lo = k * block_size
            width = min(block_size, longest - lo)
            offs = lo + np.arange(width + 1)  # (width+1,) offsets inside each email
            real = offs[None, :] <= n_targets[:, None]  # (B, width+1) positions inside the email
            pos = np.where(real, store.starts[ids][:, None] + offs[None, :], 0)  # padded slots read token 0
            w = np.asarray(store.tokens[pos]).astype(np.int64)  # (B, width+1)
            x = np.where(real[:, :-1], w[:, :-1], pad_id)  # (B, width) inputs w[:-1]
            y = np.where(real[:, 1:], w[:, 1:], IGNORE_INDEX)  # (B, width) targets, shifted by one
            yield k == 0, torch.from_numpy(x), torch.from_numpy(y)
