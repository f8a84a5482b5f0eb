"""The context path of the model (models/context_encoder.py): the encoder read through cross-attention, computed
once and kept in the state; empty contexts; per-email contexts inside one recurrent chunk."""

from __future__ import annotations

import pytest
import torch
from stepping import one_token_at_a_time
from tiny_models import V
from tiny_models import tiny_lm as _model
from tiny_models import token_ids as _ids

from seqlab.models import record_attention
from seqlab.models.context_encoder import ContextBatch

FAMILIES = [("attention", "rope"), ("gru", "none"), ("mingru", "learned"), ("rnn", "none")]


def _contexts() -> ContextBatch:
    """Three lanes: a 6-token context, a 2-token one (padded), and none at all."""
    a, b = _ids(6, seed=11).tolist(), _ids(2, seed=12).tolist()
    return ContextBatch.from_lists([a, b, []])


@pytest.mark.parametrize("mixer,pos", FAMILIES)
def test_incremental_decoding_with_context_equals_the_full_pass(mixer: str, pos: str) -> None:
    model = _model(mixer, pos, context="cross", ctx_layers=2)
    idx, ctx = _ids(3, 10, seed=2), _contexts()
    with torch.no_grad():
        full, _ = model(idx, context=ctx)
    stepped, state = one_token_at_a_time(model, idx, ctx)
    assert torch.isfinite(full).all()
    torch.testing.assert_close(stepped, full, atol=1e-5, rtol=1e-5)
    assert all(c is not None for c in state.cross)  # the encoded context is kept in the state


@pytest.mark.parametrize("mixer,pos", FAMILIES)
def test_context_acts_only_through_cross_attention(mixer: str, pos: str) -> None:
    """With every cross-attention output projection zeroed the model with a context equals the model
    without one; an empty context equals no context even with the projections in place."""
    model = _model(mixer, pos, context="cross")
    idx, ctx = _ids(3, 8, seed=3), _contexts()
    with torch.no_grad():
        with_ctx, _ = model(idx, context=ctx)
        without, _ = model(idx)
        assert not torch.allclose(with_ctx[:2], without[:2], atol=1e-4)  # the context is read
        torch.testing.assert_close(with_ctx[2], without[2], atol=1e-6, rtol=0)  # lane 2: empty context
        for block in model.blocks:
            block.xattn.out_proj.weight.zero_()
        zeroed, _ = model(idx, context=ctx)
    torch.testing.assert_close(zeroed, without, atol=1e-6, rtol=0)


def test_empty_contexts_train_without_nan() -> None:
    model = _model("attention", "rope", context="cross").train()
    ctx = ContextBatch.from_lists([[], []])
    logits, _ = model(_ids(2, 8), context=ctx)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), _ids(16, seed=9))
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("mixer,pos", [("gru", "none"), ("mingru", "learned")])
def test_each_email_of_a_chunk_reads_its_own_context(mixer: str, pos: str) -> None:
    """A stream chunk holding two emails (a reset between them), each position reading its own email's
    context through `segment`, equals the two emails fed apart, each with its context."""
    model = _model(mixer, pos, context="cross")
    first, second = _ids(1, 5, seed=4), _ids(1, 7, seed=5)
    ca, cb = _ids(4, seed=6).tolist(), _ids(3, seed=7).tolist()
    idx = torch.cat([first, second], dim=1)  # (1, 12)
    reset = torch.zeros(1, 12, dtype=torch.bool)
    reset[0, 0] = reset[0, 5] = True
    ids = torch.zeros(1, 2, 4, dtype=torch.long)
    keep = torch.zeros(1, 2, 4, dtype=torch.bool)
    ids[0, 0, :4], ids[0, 1, :3] = torch.tensor(ca), torch.tensor(cb)
    keep[0, 0, :4], keep[0, 1, :3] = True, True
    segment = torch.tensor([[0] * 5 + [1] * 7])
    with torch.no_grad():
        chunk, _ = model(idx, context=ContextBatch(ids, keep, segment), reset=reset)
        apart_a, _ = model(first, context=ContextBatch.from_lists([ca]))
        apart_b, _ = model(second, context=ContextBatch.from_lists([cb]))
    torch.testing.assert_close(chunk, torch.cat([apart_a, apart_b], dim=1), atol=1e-5, rtol=1e-5)


def test_cross_weights_are_recorded_per_head_over_context_tokens() -> None:
    model = _model("attention", "rope", context="cross")
    ctx = _contexts()
    with torch.no_grad(), record_attention() as rec:
        model(_ids(3, 5), context=ctx)
    w = rec.get(1, "cross")  # (B, H, T, Lc)
    assert w.shape == (3, 2, 5, 6)
    torch.testing.assert_close(w[0].sum(-1), torch.ones(2, 5))
    torch.testing.assert_close(w[1].sum(-1), torch.ones(2, 5))
    assert float(w[1, :, :, 2:].abs().sum()) == 0.0  # padding is never read
    assert float(w[2].abs().sum()) == 0.0  # no context: a fully masked row is zero, not NaN


def test_long_context_keeps_its_end() -> None:
    model = _model("attention", "rope", context="cross", ctx_block_size=4)
    long = _ids(1, 9, seed=8)
    with torch.no_grad():
        a, _ = model(_ids(1, 5), context=long)
        b, _ = model(_ids(1, 5), context=long[:, -4:])
    torch.testing.assert_close(a, b)
