"""Window batches for attention models, drawn from a token store (`seqlab.data.store.TokenStore`).

Every training example is a window `w` of `block_size + 1` tokens taken inside ONE email, with inputs
`x = w[:-1]` and targets `y = w[1:]` (the lecture's "shift targets by one token; split whole emails
before forming training examples"). An email shorter than a window is padded: `x` with `pad_id`, `y`
with `IGNORE_INDEX`, the one ignore label of the project, which the loss
(`seqlab.evaluation.heldout.lm_loss`) skips. No window ever reads across an email boundary, so no
target is predicted from another email's text.

- `WindowSampler.batch(step)`: random windows, a pure function of `(seed, step)`, so training resumes
  exactly from a step number.
- `eval_windows`: where the windows lie that score every target of every email exactly once (held-out
  evaluation cuts a split with it: `seqlab.evaluation.plans`).

Recurrent models read streams instead: see `seqlab.data.streams`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from seqlab.errors import UserError

if TYPE_CHECKING:
    from seqlab.data.store import TokenStore

IGNORE_INDEX = -1  # the target the loss skips (padding, no next token in the email, already scored)


def shard_rows(batch_size: int, shard: tuple[int, int]) -> slice:
    """The rows of a batch of `batch_size` that shard `(rank, world)` of a data-parallel run reads: a
    contiguous block of `batch_size // world` rows. ValueError unless the batch divides by the world."""
    rank, world = shard
    check_positive(world=world)
    if batch_size % world or not 0 <= rank < world:
        raise ValueError(f"shard {rank} of {world} does not divide a batch of {batch_size} rows")
    n = batch_size // world
    return slice(rank * n, (rank + 1) * n)


def check_positive(**values: int) -> None:
    """ValueError naming the first argument that is not a positive integer."""
    for name, v in values.items():
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, not {v!r}")


def gather_windows(tokens: np.ndarray, start: np.ndarray, length: np.ndarray, block_size: int, pad_id: int,
                   skip: np.ndarray | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut windows out of the token file and shift them into (x, y), both (B, T) int64.

    Row b reads `length[b] <= T + 1` real tokens from `tokens[start[b]:]` (the caller guarantees they
    lie in one email); the rest of the row is padding. `skip[b]` leading targets are also set to
    IGNORE_INDEX (positions already counted by an earlier evaluation window).
    """
    T = block_size
    offs = np.arange(T + 1)
    real = offs[None, :] < length[:, None]  # (B, T+1) which window positions hold email tokens
    pos = np.where(real, start[:, None] + offs[None, :], 0)  # (B, T+1) padded slots read token 0, masked below
    w = np.asarray(tokens[pos]).astype(np.int64)  # (B, T+1)
    x = np.where(real[:, :-1], w[:, :-1], pad_id)  # (B, T) inputs  x = w[:-1]
    y = np.where(real[:, 1:], w[:, 1:], IGNORE_INDEX)  # (B, T) targets y = w[1:], shifted by one
    if skip is not None:
        y[offs[None, :T] < skip[:, None]] = IGNORE_INDEX
    return torch.from_numpy(x), torch.from_numpy(y)


class WindowSampler:
    """Random training windows inside emails; `batch(step)` depends on `(seed, step)` alone.

    Placement: a window holds T targets. Among all placements of T consecutive target slots that
    overlap the email in at least `min_window_tokens` tokens (slots may hang off either end), one is
    drawn uniformly over the whole split, then slid inside the email (or left at the email's start when
    the email is shorter than a window, which is then padded). Each email thus gets `L + T + 2 - 2m`
    placements, proportional to its length for long emails, and every target token, including the first
    tokens after `bos` and the last before `eos`, is covered at least as often as a token in the middle
    of a long email. Emails with fewer than `min_window_tokens` tokens are never drawn.

    `shard=(rank, world)` (data-parallel training) returns only that rank's block of rows of the batch
    the whole run draws (`shard_rows`): the ranks' shares laid end to end are the unsharded batch.
    """

    def __init__(self, store: TokenStore, block_size: int, batch_size: int, seed: int, pad_id: int, *,
                 min_window_tokens: int = 2, shard: tuple[int, int] = (0, 1)) -> None:
        check_positive(block_size=block_size, batch_size=batch_size)
        self.rows = shard_rows(batch_size, shard)
        if not 2 <= min_window_tokens <= block_size + 1:
            raise ValueError(f"min_window_tokens must be in [2, block_size + 1], not {min_window_tokens}")
        self.store, self.block_size, self.batch_size = store, block_size, batch_size
        self.seed, self.pad_id, self.min_window_tokens = seed, pad_id, min_window_tokens
        T, m = block_size, min_window_tokens
        self._lengths = store.lengths
        self._slots = np.where(self._lengths >= m, self._lengths + T + 2 - 2 * m, 0)  # placements per email
        self._cum = np.cumsum(self._slots)
        if len(self._cum) == 0 or self._cum[-1] == 0:
            raise UserError(f"the {store.split} split has no email of at least {m} tokens to train on.")

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, y), each (B, T) int64 (B / world rows when sharded), for training step `step` (any step, in
        any order)."""
        start, length = self._draw(step)
        return gather_windows(self.store.tokens, start, length, self.block_size, self.pad_id)

    def window_starts(self, step: int) -> np.ndarray:
        """(B,) global start offsets of the windows of `batch(step)`, this shard's rows (their emails'
        contexts: reply_batches)."""
        return self._draw(step)[0]

    def _draw(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """(global start, real length), each (B,) (this shard's rows), of the windows of step `step`."""
        if step < 0:
            raise ValueError(f"step must be 0 or more, not {step}")
        T, m = self.block_size, self.min_window_tokens
        rng = np.random.default_rng([self.seed, step])  # a fresh generator per step: resume needs only the step
        u = rng.integers(0, self._cum[-1], size=self.batch_size)  # (B,) placement ids over the split
        u = u[self.rows]  # every rank draws the whole batch, so its rows do not depend on the world size
        i = np.searchsorted(self._cum, u, side="right")  # (B,) email of each placement
        r = u - (self._cum[i] - self._slots[i])  # (B,) placement inside its email
        L = self._lengths[i]
        s = np.clip(r - (T + 1 - m), 0, np.maximum(L - T - 1, 0))  # window start inside the email
        return self.store.starts[i] + s, np.minimum(T + 1, L - s)


def eval_windows(store: TokenStore, block_size: int,
                 stride: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Global start, real length and skipped leading targets of every evaluation window, in email order.

    An email of L tokens has n = L - 1 targets. Window 0 starts at the email's start; window k starts
    k * S later (stride S, default T: windows side by side) and scores only the S targets no earlier
    window scored, so with S < T every scored target after the first window sees at least T - S tokens
    of context. The last window is aligned to the email's end, so its first targets see more context,
    and skips what earlier windows already counted. Each target is counted exactly once.
    """
    T = block_size
    S = T if stride is None else stride
    L = store.lengths
    n = np.maximum(L - 1, 0)  # targets per email
    K = np.where(n > 0, 1 + (np.maximum(n - T, 0) + S - 1) // S, 0)  # windows per email
    e = np.repeat(np.arange(len(L)), K)  # (W,) email of each window
    k = np.arange(len(e)) - np.repeat(np.cumsum(K) - K, K)  # (W,) window number inside its email
    tail = (k == K[e] - 1) & (K[e] > 1)  # last window of an email that needs several
    s = np.where(tail, L[e] - 1 - T, k * S)
    covered = T + (K[e] - 2) * S  # targets counted before the tail window
    skip = np.where(tail, covered - s, np.where(k > 0, T - S, 0))
    return store.starts[e] + s, np.minimum(T + 1, L[e] - s), skip
