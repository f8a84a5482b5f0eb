"""The key/value caches self- and cross-attention read (`seqlab.models.attention.MultiHeadAttention`).

- `KVCache`: every earlier position's keys and values, for incremental decoding (generation, serving).
- `SlidingKVCache`: only the last `keep` positions, for held-out scoring in blocks
  (`seqlab.evaluation.plans`); the plain reference of
- `RingKVCache`: the same in a preallocated ring, which the scoring plans use.
- `CrossKV`: an encoded context's keys and values, computed once per email and reused at every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class KVCache:
    """Keys and values of all earlier positions of one self-attention module, for incremental decoding.

    k, v: (B, H, capacity, D) buffers of which the first `length` positions are filled; `length` is
    also the position offset of the next token (RoPE/ALiBi continue from it). Updated in place and
    grown by doubling, so decoding n tokens copies O(n) entries in total; `clone()` before branching.
    """

    k: Tensor
    v: Tensor
    length: int

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add (B, H, T, D) keys and values; return all of them so far, (B, H, length, D)."""
        need = self.length + k.size(2)
        if k.requires_grad or v.requires_grad or self.k.requires_grad:
            # under autograd an in-place write would invalidate tensors saved for backward
            self.k = torch.cat((self.k[:, :, : self.length], k), dim=2)
            self.v = torch.cat((self.v[:, :, : self.length], v), dim=2)
        else:
            if need > self.k.size(2):
                self._grow(max(need, 2 * self.k.size(2)))
            self.k[:, :, self.length : need] = k
            self.v[:, :, self.length : need] = v
        self.length = need
        return self.k[:, :, :need], self.v[:, :, :need]

    def _grow(self, capacity: int) -> None:
        for name in ("k", "v"):
            old = getattr(self, name)
            new = old.new_empty(old.size(0), old.size(1), capacity, old.size(3))  # (B, H, capacity, D)
            new[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, name, new)

    def clone(self) -> KVCache:
        return KVCache(self.k[:, :, : self.length].clone(), self.v[:, :, : self.length].clone(), self.length)


@dataclass
class SlidingKVCache:
    """A key/value cache that holds only the last `keep` positions (block-sliding held-out scoring).

    Starts empty; each call appends its T keys and values, attends to the `keep` held before them plus
    its own (causally), then holds the last `keep` again, so a block of C tokens reads at least `keep`
    earlier positions and nothing is computed twice (`seqlab.evaluation.plans`). `length` counts every
    position seen (the position of the next token, where RoPE continues), not the keys held. Only for
    positions that depend on distance alone (none, rope, alibi): the keys held keep the positions they
    were computed at. Unlike a fresh window, the keys held in deeper layers still carry what their own
    earlier positions told them (Transformer-XL's segment recurrence, Dai et al. 2019).
    """

    keep: int
    k: Tensor | None = None  # (B, H, <= keep, D)
    v: Tensor | None = None
    length: int = 0

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add (B, H, T, D) keys and values; return the held ones followed by them, (B, H, held + T, D)."""
        self.length += k.size(2)
        if self.k is not None and self.v is not None:
            k, v = torch.cat((self.k, k), dim=2), torch.cat((self.v, v), dim=2)
        cut = max(0, k.size(2) - self.keep)
        self.k, self.v = k[:, :, cut:], v[:, :, cut:]
        return k, v

    def key_positions(self, lk: int, device: torch.device) -> Tensor:
        """(Lk,) the positions of the Lk keys the last `append` returned: the last Lk seen, in order."""
        return torch.arange(self.length - lk, self.length, device=device)


@dataclass
class RingKVCache:
    """`SlidingKVCache`'s keys and values in a preallocated ring, so a call writes only its own T.

    k, v: (B, H, R, D) with R = keep + the first call's T (no later call may be longer); position p
    sits in slot p % R. Once the ring has gone round, `append` returns the whole ring, its slots out of
    order, and `key_positions` says which position each holds; attention masks by those positions
    (`MultiHeadAttention._self_mask`), so the result is SlidingKVCache's: a call's queries read the
    `keep` positions before it and their own, causally. Nothing older is read even when a short last
    call leaves older positions in the ring. Only for positions that depend on distance alone."""

    keep: int
    k: Tensor | None = None  # (B, H, R, D)
    v: Tensor | None = None
    length: int = 0  # positions seen; the next one's position

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write (B, H, T, D) keys and values; return the filled slots (B, H, min(length, R), D)."""
        b, h, t, d = k.shape
        if self.k is None or self.v is None:
            self.k, self.v = k.new_empty(b, h, self.keep + t, d), v.new_empty(b, h, self.keep + t, v.size(3))
        ring = self.k.size(2)
        if t > ring - self.keep:
            raise ValueError(f"a call of {t} positions is longer than the ring's first call ({ring - self.keep})")
        start = self.length % ring
        first = min(t, ring - start)  # slots start..start+first-1, then wrap to 0..t-first-1
        self.k[:, :, start:start + first], self.v[:, :, start:start + first] = k[:, :, :first], v[:, :, :first]
        if first < t:
            self.k[:, :, :t - first], self.v[:, :, :t - first] = k[:, :, first:], v[:, :, first:]
        self.length += t
        n = min(self.length, ring)  # before the ring is full, its first slots hold positions 0..length-1
        return self.k[:, :, :n], self.v[:, :, :n]

    def key_positions(self, lk: int, device: torch.device) -> Tensor:
        """(Lk,) the position each returned slot holds: the latest p < length with p % R == slot."""
        ring = self.k.size(2) if self.k is not None else lk
        last = self.length - 1
        slots = torch.arange(lk, device=device)
        return last - torch.remainder(last - slots, ring)


@dataclass
class CrossKV:
    """Keys and values (B, H, Lc, D) of an encoded context, computed once and reused at every step."""

    k: Tensor
    v: Tensor
    keep: Tensor | None = None  # (B, Lc) bool, False for context padding
