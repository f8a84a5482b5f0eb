"""The lecture's attention: one equation, its masks, and a multi-head module for self- and cross-attention.

- `attention(q, k, v, mask)`: S = Q K^T / sqrt(d_k) + M, A = softmax_row(S) with the row maximum
  subtracted, Y = A V (slides "Self-attention is one input-dependent matrix operation", "Softmax turns
  matching scores into relative combination weights", "A causal mask removes future positions before
  softmax"). When A is not needed the same result comes from the fused
  `torch.nn.functional.scaled_dot_product_attention`; both give zeros for a fully masked row.
- `causal_mask(L)`, `document_mask(doc_ids)`: additive masks (0 = may attend, -inf = may not).
- `MultiHeadAttention`: W_Q, W_K, W_V, an output projection, heads as learned subspaces of width
  d_k = n_embd / n_head; self-attention (keys and values from X) or cross-attention (keys and values
  from a context C, slide "Cross-attention gets queries and context from different sequences"); the
  key/value caches it reads and fills (`seqlab.models.kv_cache`), all through one
  `MultiHeadAttention.self_attend`, which the decoder's one-token step calls too; weights exposed
  through `recorder.record_attention()`;
  optional QK-norm (`qk_norm=True`): RMSNorm with a learned gain on each head's queries and keys before
  the dot product, which bounds the logits Q K^T / sqrt(d_k) and keeps the softmax from saturating at
  high learning rates (Dehghani et al. 2023, "Scaling Vision Transformers to 22 Billion Parameters",
  section 2.1; Wortsman et al. 2023, "Small-scale proxies for large-scale Transformer training
  instabilities", section 3.1).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.models.cpu_linear import apply_linear, linear
from seqlab.models.kv_cache import CrossKV, KVCache, RingKVCache, SlidingKVCache
from seqlab.models.positional import PositionHandler
from seqlab.models.recorder import active_recorder

SelfCache = KVCache | SlidingKVCache | RingKVCache  # what self-attention reads and fills


def stable_softmax(s: Tensor, dim: int = -1) -> Tensor:
    """a_j = exp(s_j - m) / sum_k exp(s_k - m), m = max_k s_k (lecture: "Subtracting the row maximum
    preserves the weights and avoids large exponentials"). A row that is all -inf gives all zeros."""
    # m carries no gradient: the weights do not depend on it, so detaching changes nothing but work
    m = s.detach().amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # all -inf row: exp(-inf - 0) = 0
    e = torch.exp(s - m)
    z = e.sum(dim=dim, keepdim=True)
    return e / torch.where(z > 0, z, torch.ones_like(z))  # 0 / 1 = 0 on a fully masked row


def causal_mask(L: int, device: torch.device | str | None = None, offset: int = 0) -> Tensor:
    """The lecture's additive causal mask M: 0 on and below the diagonal, -inf above.

    Returns (L, offset + L): query row i sits at position offset + i and may see keys 0..offset + i
    (offset > 0 is the key/value-cache case; offset = 0 gives the square L x L matrix of the slide).
    """
    full = torch.full((L, offset + L), float("-inf"), device=device)
    return torch.triu(full, diagonal=offset + 1)


def document_mask(doc_ids: Tensor) -> Tensor:
    """Block-diagonal causal mask for packed sequences: doc_ids (B, L) -> additive (B, 1, L, L).

    Query i may see key j iff j <= i and both belong to the same document; the singleton head axis
    broadcasts over heads. The diagonal is always allowed, so no row is ever fully masked.
    """
    L = doc_ids.size(1)
    same = doc_ids[:, :, None] == doc_ids[:, None, :]  # (B, L, L)
    past = torch.ones(L, L, dtype=torch.bool, device=doc_ids.device).tril()  # (L, L)
    keep = (same & past).unsqueeze(1)  # (B, 1, L, L)
    zero = torch.zeros((), device=doc_ids.device)
    return torch.where(keep, zero, torch.full_like(zero, float("-inf")))


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    need_weights: bool = False,
    dropout_p: float = 0.0,
    training: bool = False,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Y = softmax_row(Q K^T / sqrt(d_k) + M) V for q (..., Lq, D), k (..., Lk, D), v (..., Lk, Dv).

    mask: additive float (0 / -inf / any bias), broadcastable to (..., Lq, Lk). is_causal=True means
    M = causal_mask(L) without building it (needs Lq == Lk and mask None). Returns (Y (..., Lq, Dv),
    A (..., Lq, Lk) before dropout, or None). The explicit path runs when need_weights is True.
    """
    lq, lk = q.size(-2), k.size(-2)
    if is_causal and (mask is not None or lq != lk):
        raise ValueError(f"is_causal=True needs mask=None and Lq == Lk, got Lq={lq}, Lk={lk}")
    p = dropout_p if training else 0.0
    if not need_weights:
        if mask is not None and mask.dtype != q.dtype:
            mask = mask.to(q.dtype)  # the fused kernel wants the query dtype (or bool)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=is_causal)
        if mask is not None:
            # fully masked rows: some kernels return NaN, the explicit path returns 0; agree on 0
            dead = torch.isneginf(mask).all(dim=-1, keepdim=True)  # (..., Lq, 1)
            y = y.masked_fill(dead, 0.0)
        return y, None
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., Lq, Lk): S = Q K^T / sqrt(d_k)
    if is_causal:
        s = s + causal_mask(lq, device=q.device).to(s.dtype)
    elif mask is not None:
        s = s + mask.to(s.dtype)
    a = stable_softmax(s, dim=-1)  # A, one normalized row per query
    y = F.dropout(a, p=p, training=p > 0) @ v  # (..., Lq, Dv): Y = A V
    return y, a


def padding_bias(keep: Tensor, dtype: torch.dtype) -> Tensor:
    """(B, Lc) bool -> additive (B, 1, 1, Lc): 0 where a context row may be attended, -inf for padding.
    A per-query keep (B, Lq, Lc) gives (B, 1, Lq, Lc) (each query its own context rows)."""
    zero = torch.zeros((), dtype=dtype, device=keep.device)
    bias = torch.where(keep, zero, torch.full_like(zero, float("-inf")))
    return bias[:, None, None, :] if keep.dim() == 2 else bias[:, None, :, :]


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention; single-head is n_head=1.

    Q = X W_Q, K = Z W_K, V = Z W_V with Z = X (self) or Z = C (cross); each head attends in its own
    d_k = n_embd / n_head wide subspace and the heads are concatenated and projected by W_O.
    kdim: width of the context rows for cross-attention (default n_embd).
    qk_norm: RMSNorm (over d_k, one gain per head width) on queries and keys of self-attention.
    """

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        bias: bool = False,
        dropout: float = 0.0,
        pos: PositionHandler | None = None,
        kdim: int | None = None,
        qk_norm: bool = False,
    ) -> None:
        super().__init__()
        if n_embd % n_head:
            raise ValueError(f"n_embd={n_embd} must be divisible by n_head={n_head}")
        self.n_embd, self.n_head, self.head_dim = n_embd, n_head, n_embd // n_head
        self.kdim = kdim or n_embd
        self.q_proj = nn.Linear(n_embd, n_embd, bias=bias)  # W_Q for all heads side by side
        self.kv_proj = nn.Linear(self.kdim, 2 * n_embd, bias=bias)  # [W_K | W_V]: one matmul for both
        self.out_proj = nn.Linear(n_embd, n_embd, bias=bias)  # W_O
        self.dropout = dropout
        self.pos = pos  # rope / alibi act here; additive positions are added by the LM
        self.layer = -1  # block index, set by the LM, used to label recorded weights
        self.cross_kind = "cross"  # the label of recorded cross-attention weights ("context": the encoder)
        self.q_norm = nn.RMSNorm(self.head_dim) if qk_norm else None
        self.k_norm = nn.RMSNorm(self.head_dim) if qk_norm else None

    def _qk_norm(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """q, k (B, H, L, D) -> each row divided by its RMS over D and scaled by a learned gain (D,);
        applied before rotary positions, so the rotation acts on the normalised vectors."""
        if self.q_norm is None or self.k_norm is None:
            return q, k
        return self.q_norm(q), self.k_norm(k)

    def _heads(self, t: Tensor) -> Tensor:
        """(B, L, C) -> (B, H, L, D): split the features into H subspaces of width D."""
        b, length, _ = t.shape
        return t.view(b, length, self.n_head, self.head_dim).transpose(1, 2)

    def _merge(self, y: Tensor) -> Tensor:
        """(B, H, L, D) -> (B, L, C): concatenate the heads, then W_O."""
        b, _, length, _ = y.shape
        return apply_linear(self.out_proj, y.transpose(1, 2).reshape(b, length, self.n_embd))

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        state: KVCache | SlidingKVCache | RingKVCache | CrossKV | None = None,
        reset: Tensor | None = None,
        causal: bool = True,
        context_mask: Tensor | None = None,
    ) -> tuple[Tensor, KVCache | SlidingKVCache | RingKVCache | CrossKV]:
        """x (B, T, C) -> (y (B, T, C), state).

        Self-attention when context is None and state is not a CrossKV: state is the KVCache of earlier
        positions (None at the start) and the returned state includes this call's keys and values.
        Cross-attention when context (B, Lc, kdim) is given (or state is a CrossKV from an earlier
        call): never causal, no positions; context_mask (B, Lc) bool marks real context rows, or
        (B, T, Lc) the rows each query may read (not cached; given again with later queries).
        `reset` is accepted for the mixer contract and ignored (attention has no running state).
        """
        if context is not None or isinstance(state, CrossKV):
            return self._cross(x, context, state, context_mask)
        if self.kdim != self.n_embd:
            raise ValueError(f"self-attention needs kdim == n_embd, but kdim={self.kdim}, n_embd={self.n_embd}")
        # Q, K and V in one matmul through [W_Q; W_K | W_V]: the two projections' backward passes would
        # otherwise each compute a (B, T, C) input gradient and add them (seqlab bench, "throughput")
        w = torch.cat((self.q_proj.weight, self.kv_proj.weight))  # (3C, C)
        b = None if self.q_proj.bias is None else torch.cat((self.q_proj.bias, self.kv_proj.bias))
        q, k, v = (self._heads(z) for z in linear(x, w, b).split(self.n_embd, dim=-1))  # (B, H, T, D) each
        y, state = self.self_attend(q, k, v, state, causal)
        return self._merge(y), state

    def self_attend(self, q: Tensor, k: Tensor, v: Tensor, cache: SelfCache | None, causal: bool = True
                    ) -> tuple[Tensor, SelfCache]:
        """The one self-attention of training, decoding (generation/fast_step.py) and held-out scoring.

        q, k, v (B, H, T, D) projected for T new positions -> (Y (B, H, T, D) before W_O, the cache
        holding their keys). The new positions continue the cache's (offset = cache.length; None: a
        fresh start at 0): QK-norm, then the positions' `rotate` (RoPE: keys are cached already rotated),
        then the cache returns the keys it holds and the mask says which each query may read
        (`_self_mask`), then softmax(Q K^T / sqrt(d_k) + M) V (`attention`)."""
        t = q.size(2)
        offset = cache.length if cache is not None else 0  # position of the first new token
        q, k = self._qk_norm(q, k)
        if self.pos is not None:
            q, k = self.pos.rotate(q, k, offset)
        if cache is None:
            cache = KVCache(k, v, t)  # no copy: the cache starts as this call's tensors
        else:
            k, v = cache.append(k, v)  # (B, H, Lk, D): the keys held and the T new
        mask, is_causal = self._self_mask(cache, offset, t, k.size(2), causal, q)
        return self._attention(q, k, v, mask, is_causal, "self"), cache

    def _attention(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool,
                   kind: str) -> Tensor:
        """`attention` with this module's dropout, its weights recorded when a recorder listens: (B, H, Lq, D)."""
        rec = active_recorder()
        y, a = attention(q, k, v, mask=mask, need_weights=rec is not None, dropout_p=self.dropout,
                         training=self.training, is_causal=is_causal)
        if rec is not None and a is not None:
            rec.add(self.layer, kind, a)
        return y

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool, kind: str) -> Tensor:
        """`_attention`, heads merged and projected by W_O: (B, Lq, C)."""
        return self._merge(self._attention(q, k, v, mask, is_causal, kind))

    def _self_mask(self, cache: SelfCache, offset: int, t: int, lk: int, causal: bool,
                   q: Tensor) -> tuple[Tensor | None, bool]:
        """The additive mask of T queries at offset.. over the Lk keys the cache returned, (T, Lk) or
        (H, T, Lk) with ALiBi's bias, and whether the fused kernel's causal square stands in for it."""
        if causal and isinstance(cache, (SlidingKVCache, RingKVCache)):
            mask = self._sliding_mask(cache, offset, t, lk, q.device, q.dtype)
            return mask, mask is None and t > 1  # no mask: only this call's keys, in order
        past = lk - t  # keys before the new ones: offset, or fewer once a sliding cache drops the oldest
        # the plain causal square takes the fused kernel's is_causal route; one new token needs no mask
        mask = causal_mask(t, q.device, past) if causal and t > 1 and past > 0 else None
        is_causal = causal and t > 1 and past == 0
        # ALiBi depends on distance only: queries counted from the first key held
        bias = self.pos.score_bias(t, lk, past, q.device, q.dtype) if self.pos is not None else None
        if bias is not None:  # ALiBi: fold the per-head bias and the causal mask into one float mask
            if is_causal:
                mask, is_causal = causal_mask(t, q.device), False
            mask = bias if mask is None else bias + mask.to(bias.dtype)  # (H, T, Lk)
        return mask, is_causal

    def _sliding_mask(self, state: SlidingKVCache | RingKVCache, offset: int, t: int, lk: int,
                      device: torch.device, dtype: torch.dtype) -> Tensor | None:
        """The additive mask (T, Lk), or (H, T, Lk) with ALiBi's bias, of a sliding call whose queries sit
        at offset..offset+T-1: key position p is read iff offset - keep <= p <= the query's position.
        None when the keys are exactly this call's, in order, and no bias applies (`is_causal`)."""
        alibi = self.pos is not None and type(self.pos).bias_at is not PositionHandler.bias_at
        if lk == t and not alibi:
            return None
        kpos = state.key_positions(lk, device)  # (Lk,)
        qpos = torch.arange(offset, offset + t, device=device)  # (T,)
        read = (kpos[None, :] <= qpos[:, None]) & (kpos[None, :] >= offset - state.keep)  # (T, Lk)
        zero = torch.zeros((), dtype=dtype, device=device)
        mask = torch.where(read, zero, torch.full_like(zero, float("-inf")))
        bias = self.pos.bias_at(qpos, kpos, dtype) if alibi and self.pos is not None else None
        return mask if bias is None else bias + mask  # (H, T, Lk): ALiBi by distance, then the mask

    def _cross(
        self, x: Tensor, context: Tensor | None, state: CrossKV | None, keep: Tensor | None
    ) -> tuple[Tensor, CrossKV]:
        if context is not None:
            k, v = (self._heads(z) for z in self.kv_proj(context).split(self.n_embd, dim=-1))  # (B, H, Lc, D)
            # a per-query mask (B, Lq, Lc) belongs to this call's queries only: not cached
            state = CrossKV(k, v, keep if keep is None or keep.dim() == 2 else None)
        assert state is not None  # forward() routes here only with a context or a CrossKV
        keep = keep if keep is not None else state.keep
        q = self._heads(self.q_proj(x))  # (B, H, Lq, D)
        mask = padding_bias(keep, q.dtype) if keep is not None else None  # (B, 1, 1 or Lq, Lc)
        return self._attend(q, state.k, state.v, mask, False, self.cross_kind), state
