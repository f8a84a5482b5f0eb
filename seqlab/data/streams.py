"""Stream batches for recurrent models, drawn from a token store: the training streams.

`StreamSampler` (training by truncated BPTT; held-out evaluation reads whole emails as lanes instead,
`seqlab.evaluation.plans`). Layout of one epoch: the emails of the split are put in
an order (a permutation drawn from `(seed, epoch)`) and laid end to end into one stream of N tokens.
The stream is cut into B contiguous lane shares, lane b reading stream positions
`[b*N // B, (b+1)*N // B)`. Chunk k of lane b is the T positions starting at `lo_b + k*T`, so chunk k
continues exactly where chunk k - 1 ended and a hidden state carried (detached) from one chunk to the
next is the state the model would have had over the whole email.

- `reset[b, t]` is True at the first token of every email (the model resets its hidden state there),
  at the first position of each lane in an epoch (a lane may start inside an email, with a fresh state),
  and at padding.
- `y` at an email's last token (its eos) is IGNORE_INDEX: the next token in the stream belongs to
  another email, and nothing is ever predicted across emails. At the end of a lane share the target is
  still the next token of the same email (read from the next lane's share), so one epoch predicts every
  target token of the split exactly once.
- Epochs wrap after `steps_per_epoch = ceil(ceil(N / B) / T)` steps: step s is chunk `s % steps_per_epoch`
  of epoch `s // steps_per_epoch`. The last chunk of an epoch is padded where a lane runs out (x with
  `pad_id`, y with IGNORE_INDEX, reset True); the next epoch starts a new permutation with reset True
  everywhere a lane begins. `batch(step)` is therefore a pure function of `(seed, step)` (with the
  store, T and B fixed), and training resumes exactly from a step number.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from seqlab.data.batches import IGNORE_INDEX, check_positive, shard_rows
from seqlab.errors import UserError

if TYPE_CHECKING:
    from seqlab.data.store import TokenStore

_ORDER_STREAM = 0x53_54  # keeps the epoch permutations apart from other draws made with the same seed


class StreamSampler:
    """B lanes, each reading its share of an epoch's email stream in chunks of T tokens.

    `shard=(rank, world)` (data-parallel training) reads only that rank's contiguous block of B / world
    lanes (`shard_rows`): a lane, and the hidden state carried along it, never moves between ranks, and
    the ranks' lanes laid end to end are the unsharded batch.
    """

    def __init__(self, store: TokenStore, block_size: int, batch_size: int, seed: int, pad_id: int, *,
                 shard: tuple[int, int] = (0, 1)) -> None:
        check_positive(block_size=block_size, batch_size=batch_size)
        self.rows = shard_rows(batch_size, shard)
        if store.num_tokens == 0:
            raise UserError(f"the {store.split} split holds no tokens to train on.")
        self.store, self.block_size, self.batch_size = store, block_size, batch_size
        self.seed, self.pad_id = seed, pad_id
        n, b = store.num_tokens, np.arange(batch_size + 1, dtype=np.int64)
        bounds = b * n // batch_size  # (B+1,) lane b owns stream positions [bounds[b], bounds[b+1])
        self.lane_start, self.lane_end = bounds[:-1], bounds[1:]
        self._layout_cache: tuple[int, np.ndarray, np.ndarray] | None = None

    @property
    def steps_per_epoch(self) -> int:
        """Chunks needed for the longest lane share to be read once."""
        longest = int((self.lane_end - self.lane_start).max())
        return max(1, -(-longest // self.block_size))

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The email ids of epoch `epoch` in stream order."""
        return np.random.default_rng([self.seed, epoch, _ORDER_STREAM]).permutation(self.store.num_emails)

    def _layout(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(offset of each ordered email in the stream with N appended, its start in the token file)."""
        if self._layout_cache is None or self._layout_cache[0] != epoch:
            order = self.epoch_order(epoch)
            cum = np.concatenate([[0], np.cumsum(self.store.lengths[order])])  # (E+1,)
            self._layout_cache = (epoch, cum, self.store.starts[order])
        return self._layout_cache[1], self._layout_cache[2]

    def position(self, step: int) -> tuple[int, int]:
        """(epoch, chunk) that training step `step` reads."""
        if step < 0:
            raise ValueError(f"step must be 0 or more, not {step}")
        return divmod(step, self.steps_per_epoch)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(x, y, reset): x and y (B, T) int64, reset (B, T) bool, for training step `step` (B / world
        lanes when sharded)."""
        epoch, chunk = self.position(step)
        T, n = self.block_size, self.store.num_tokens
        cum, src = self._layout(epoch)
        lane_start, lane_end = self.lane_start[self.rows], self.lane_end[self.rows]  # this shard's lanes
        # (B, T+1) stream positions: the chunk's T inputs plus one lookahead for the last target
        q = lane_start[:, None] + chunk * T + np.arange(T + 1)[None, :]
        in_lane = q[:, :T] < lane_end[:, None]  # (B, T) real inputs; the rest is padding
        qc = np.minimum(q, n - 1)
        j = np.searchsorted(cum, qc, side="right") - 1  # (B, T+1) ordered email holding each position
        off = qc - cum[j]  # (B, T+1) offset inside that email
        tok = np.asarray(self.store.tokens[src[j] + off]).astype(np.int64)  # (B, T+1)
        first = off == 0  # (B, T+1) first token of an email
        x = np.where(in_lane, tok[:, :T], self.pad_id)
        # a target exists when the next stream position is inside the split and inside the same email
        has_next = in_lane & (q[:, 1:] < n) & ~first[:, 1:]
        y = np.where(has_next, tok[:, 1:], IGNORE_INDEX)
        reset = ~in_lane | first[:, :T] | (q[:, :T] == lane_start[:, None])
        return torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(reset)
