"""The sliding caches of held-out scoring (models/kv_cache.py) through the one self-attention
(models/attention.py `self_attend`) against a window recomputed afresh: the ring of keys and the
concatenating SlidingKVCache, the mask by slot positions against the plain causal square of a fresh call,
lanes dropped between calls. Float64, so the paths differ only in summation order."""

from __future__ import annotations

import pytest
import torch

from seqlab.config import ModelConfig
from seqlab.models.attention import MultiHeadAttention
from seqlab.models.kv_cache import RingKVCache, SlidingKVCache
from seqlab.models.lm import map_tensors
from seqlab.models.positional import RotaryPositions, attention_positions

KEEP = 4
WIDTHS = (4, 4, 4, 4, 2)  # calls of KEEP tokens, the last one shorter: the ring then holds older keys too


def attention_module(pos: str, qk_norm: bool = False, bias: bool = False) -> MultiHeadAttention:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=32, block_size=2 * KEEP, n_layer=1, n_embd=16, n_head=2, pos=pos)
    mha = MultiHeadAttention(16, 2, bias=bias, pos=attention_positions(cfg), qk_norm=qk_norm).double().eval()
    if isinstance(mha.pos, RotaryPositions):
        # grow the cos/sin table now: a table regrown in float64 midway would differ from the float32 one
        # built at construction by float32 rounding, between the paths compared
        mha.pos.tables(0, 4 * sum(WIDTHS), torch.float64)
    if bias:
        with torch.no_grad():
            for p in (mha.q_proj.bias, mha.kv_proj.bias):
                p.normal_()
    return mha


def run_calls(mha: MultiHeadAttention, x: torch.Tensor, state: object, drop_after: int = -1) -> list[torch.Tensor]:
    """Feed x (B, L, C) in WIDTHS-sized calls; after call `drop_after` keep only lanes 1.. (as a plan
    drops ended emails)."""
    out, lo = [], 0
    with torch.no_grad():
        for i, t in enumerate(WIDTHS):
            y, state = mha(x[:, lo:lo + t], state=state)
            out.append(y)
            lo += t
            if i == drop_after:
                x = x[1:]
                state = map_tensors(state, lambda s: s.index_select(0, torch.arange(1, s.size(0))))
    return out


def windows(mha: MultiHeadAttention, x: torch.Tensor, drop_after: int = -1) -> list[torch.Tensor]:
    """Each call of `run_calls` recomputed afresh: causal attention over the KEEP inputs before the call
    and the call's own, at their own positions, nothing held before them (lanes are independent, so
    dropping one is slicing it off)."""
    out, lo = [], 0
    with torch.no_grad():
        for i, t in enumerate(WIDTHS):
            start = max(0, lo - KEEP)
            y, _ = mha(x[:, start:lo + t], state=SlidingKVCache(10**9, length=start))
            out.append(y[:, lo - start:] if i <= drop_after or drop_after < 0 else y[1:, lo - start:])
            lo += t
    return out


@pytest.mark.parametrize("pos,qk_norm,bias", [("none", False, False), ("rope", False, False),
                                              ("rope", False, True), ("rope", True, False),
                                              ("alibi", False, False)])
def test_ring_and_sliding_path_equal_the_generic_attention(pos: str, qk_norm: bool, bias: bool) -> None:
    mha = attention_module(pos, qk_norm, bias)
    x = torch.randn(3, sum(WIDTHS), 16, dtype=torch.float64)
    generic = windows(mha, x, drop_after=1)
    concatenated = run_calls(mha, x, SlidingKVCache(KEEP), drop_after=1)
    ring = run_calls(mha, x, RingKVCache(KEEP), drop_after=1)
    for g, c, r in zip(generic, concatenated, ring):
        torch.testing.assert_close(c, g, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(r, g, rtol=1e-12, atol=1e-14)


def test_sliding_path_reads_only_the_keys_before_each_call() -> None:
    """Each call of the ring path equals plain causal attention over the KEEP inputs before the call and
    the call's own, computed with every earlier input at hand (a plain cache over the whole prefix, the
    call's queries masked to the window by hand)."""
    mha = attention_module("rope")
    x = torch.randn(2, sum(WIDTHS), 16, dtype=torch.float64)
    ring = run_calls(mha, x, RingKVCache(KEEP))
    w = torch.cat((mha.q_proj.weight, mha.kv_proj.weight))
    q, k, v = (mha._heads(z) for z in (x @ w.T).split(16, dim=-1))  # (B, H, L, D): every position at once
    q, k = mha.pos.rotate(q, k, 0)
    lo = 0
    for y, t in zip(ring, WIDTHS):
        qi = torch.arange(lo, lo + t)[:, None]
        kj = torch.arange(lo + t)[None, :]
        read = (kj <= qi) & (kj >= lo - KEEP)  # (T, lo + T): the window before the call and the call, causal
        mask = torch.zeros(read.shape, dtype=torch.float64).masked_fill(~read, float("-inf"))
        a = torch.softmax(q[:, :, lo:lo + t] @ k[:, :, :lo + t].transpose(-2, -1) / 8**0.5 + mask, dim=-1)
        want = mha._merge(a @ v[:, :, :lo + t]).detach()
        torch.testing.assert_close(y, want, rtol=1e-12, atol=1e-14)
        lo += t


def test_ring_slots_and_positions() -> None:
    ring = RingKVCache(keep=3)
    pos = torch.arange(20.0).view(1, 1, 20, 1)  # each key's value is its position
    seen = []
    for lo, t in ((0, 2), (2, 2), (4, 2), (6, 2), (8, 1)):
        k, _ = ring.append(pos[:, :, lo:lo + t], pos[:, :, lo:lo + t])
        where = ring.key_positions(k.size(2), torch.device("cpu"))
        assert k.flatten().tolist() == where.tolist()  # each slot holds the position it says
        seen.append(sorted(where.tolist()))
    assert seen == [[0, 1], [0, 1, 2, 3], [1, 2, 3, 4, 5], [3, 4, 5, 6, 7], [4, 5, 6, 7, 8]]
    assert ring.k is not None and ring.k.size(2) == 5  # keep + the first call's width, never grown
    with pytest.raises(ValueError, match="longer"):
        ring.append(pos[:, :, :3], pos[:, :, :3])


@pytest.mark.parametrize("pos", ["rope", "alibi", "none"])
def test_sliding_path_under_bf16_autocast_is_the_float32_result_to_bf16_accuracy(pos: str) -> None:
    """The trainer's validation under train.precision=bf16 runs this path under autocast; the result is
    the float32 one to bf16 rounding."""
    mha = attention_module(pos).float()
    x = torch.randn(3, sum(WIDTHS), 16)
    exact = windows(mha, x, drop_after=1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ring = run_calls(mha, x, RingKVCache(KEEP), drop_after=1)
        generic = windows(mha, x, drop_after=1)
    for e, r, g in zip(exact, ring, generic):
        assert r.dtype == torch.bfloat16
        scale = e.abs().max()
        assert (r.float() - e).abs().max() <= 3e-2 * scale
        assert (r.float() - g.float()).abs().max() <= 3e-2 * scale
