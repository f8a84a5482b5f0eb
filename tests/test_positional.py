"""Positions: the lecture's order claims (permutation equivariance broken, "report before slides"),
each kind's formula, and positions continuing past the cache offset and past block_size (attention decoding
token by token past block_size with rope and alibi is part of test_model_contract.py)."""

from __future__ import annotations

import math

import pytest
import torch

from seqlab.config import ModelConfig
from seqlab.models.attention import MultiHeadAttention, attention, causal_mask
from seqlab.models.positional import (
    ALiBiPositions,
    LearnedPositions,
    PositionHandler,
    RotaryPositions,
    SinusoidalPositions,
    alibi_slopes,
    attention_positions,
    build_positions,
    sinusoid_table,
)

KINDS = ["none", "learned", "sinusoidal", "rope", "alibi"]


def _self_attention(kind: str, seed: int = 0) -> tuple[PositionHandler, MultiHeadAttention]:
    """A non-causal self-attention layer with the positions of one kind (embedding- or score-level)."""
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=16, block_size=16, n_embd=16, n_head=2, pos=kind)
    return build_positions(cfg), MultiHeadAttention(16, 2, pos=attention_positions(cfg)).eval()


def _sa(kind: str, rows: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """SA(X) for rows (L, C) with positions 0..L-1 of the given kind, no mask; returns (L, C)."""
    add, mha = _self_attention(kind, seed)
    x = rows.unsqueeze(0)  # (1, L, C)
    pe = add.embed(torch.arange(rows.size(0)).unsqueeze(0))
    if pe is not None:
        x = x + pe
    return mha(x, causal=False)[0][0]


@pytest.mark.parametrize("kind", KINDS)
def test_permutation_equivariance_holds_only_without_positions(kind: str) -> None:
    torch.manual_seed(1)
    x = torch.randn(8, 16)
    perm = torch.randperm(8, generator=torch.Generator().manual_seed(2))
    y, y_perm = _sa(kind, x), _sa(kind, x[perm])
    if kind == "none":
        torch.testing.assert_close(y_perm, y[perm], atol=1e-6, rtol=1e-5)  # SA(PX) = P SA(X)
    else:
        assert not torch.allclose(y_perm, y[perm], atol=1e-3)


@pytest.mark.parametrize("kind", KINDS)
def test_report_before_slides(kind: str) -> None:
    # slide "A sequence needs order": the same words in another order
    words = ["send", "the", "report", "before", "slides", "."]
    torch.manual_seed(3)
    table = torch.randn(len(words), 16)  # a tiny word-level embedding
    first = "send the report before the slides .".split()
    second = "send the slides before the report .".split()
    y1 = _sa(kind, table[[words.index(w) for w in first]])
    y2 = _sa(kind, table[[words.index(w) for w in second]])
    report1, report2 = y1[first.index("report")], y2[second.index("report")]
    if kind == "none":
        torch.testing.assert_close(report1, report2, atol=1e-6, rtol=1e-5)  # same vector, another row
    else:
        assert not torch.allclose(report1, report2, atol=1e-3)


def test_sinusoidal_formula_and_beyond_block_size() -> None:
    pos = SinusoidalPositions(block_size=8, n_embd=6)
    p = torch.arange(20).unsqueeze(0)  # (1, 20): past block_size = 8
    pe = pos.embed(p)
    assert pe.shape == (1, 20, 6)
    for t in (0, 3, 7, 8, 19):
        for i in range(3):
            angle = t / 10000 ** (2 * i / 6)
            assert pe[0, t, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert pe[0, t, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)
    torch.testing.assert_close(pos.embed(torch.arange(8).unsqueeze(0)), pe[:, :8])  # cached == on the fly
    assert sinusoid_table(torch.arange(4), 5).shape == (4, 5)  # odd width
    assert "table" not in pos.state_dict()  # a cache, never in a checkpoint


def test_learned_positions_beyond_block_size_is_an_error() -> None:
    pos = LearnedPositions(block_size=4, n_embd=8)
    assert pos.embed(torch.arange(4).unsqueeze(0)).shape == (1, 4, 8)
    with pytest.raises(ValueError, match="block_size=4"):
        pos.embed(torch.arange(5).unsqueeze(0))


def test_rope_depends_only_on_relative_position() -> None:
    rope = RotaryPositions(head_dim=8, block_size=4)  # cache shorter than the positions used: it grows
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    dots = []
    for m, n in ((5, 2), (9, 6), (3, 0)):  # same distance m - n = 3
        qm, _ = rope.rotate(q, q, m)
        _, kn = rope.rotate(k, k, n)
        dots.append((qm * kn).sum().item())
    assert dots[0] == pytest.approx(dots[1], abs=1e-5) and dots[0] == pytest.approx(dots[2], abs=1e-5)
    qr, _ = rope.rotate(q, k, 7)
    assert qr.norm().item() == pytest.approx(q.norm().item(), rel=1e-5)  # a rotation keeps the norm
    x = torch.randn(2, 3, 10, 8)
    full, _ = rope.rotate(x, x, 0)
    tail, _ = rope.rotate(x[:, :, 6:], x[:, :, 6:], 6)  # decoding continues from the offset
    torch.testing.assert_close(tail, full[:, :, 6:])
    with pytest.raises(ValueError, match="even"):
        RotaryPositions(head_dim=5, block_size=4)


def test_alibi_slopes_and_bias() -> None:
    assert alibi_slopes(8).tolist() == [2.0 ** -i for i in range(1, 9)]  # Press et al. 2022: 1/2 .. 1/256
    assert alibi_slopes(4).tolist() == [2.0 ** -i for i in (2, 4, 6, 8)]
    assert alibi_slopes(6).tolist() == [2.0 ** -i for i in (2, 4, 6, 8, 1, 3)]  # non-power-of-two recipe
    alibi = ALiBiPositions(n_head=2)
    bias = alibi.score_bias(2, 5, offset=3, device=torch.device("cpu"), dtype=torch.float32)
    assert bias.shape == (2, 2, 5)
    slopes = alibi_slopes(2)
    for h in range(2):
        for i in range(2):
            for j in range(5):
                assert bias[h, i, j].item() == pytest.approx(-slopes[h].item() * abs(3 + i - j))


def test_alibi_as_float_mask_on_both_paths() -> None:
    alibi = ALiBiPositions(n_head=3)
    q, k, v = torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 4)
    mask = alibi.score_bias(6, 6, 0, q.device, q.dtype) + causal_mask(6)  # (H, L, L)
    y_fast, _ = attention(q, k, v, mask=mask)
    y_slow, _ = attention(q, k, v, mask=mask, need_weights=True)
    torch.testing.assert_close(y_fast, y_slow, atol=1e-5, rtol=1e-5)


def test_one_config_string_selects() -> None:
    expect = {"none": (PositionHandler, None), "learned": (LearnedPositions, None),
              "sinusoidal": (SinusoidalPositions, None), "rope": (PositionHandler, RotaryPositions),
              "alibi": (PositionHandler, ALiBiPositions)}
    for kind, (outer, inner) in expect.items():
        cfg = ModelConfig(n_embd=16, n_head=2, pos=kind)
        assert type(build_positions(cfg)) is outer
        got = attention_positions(cfg)
        assert (got is None) if inner is None else isinstance(got, inner)


@pytest.mark.parametrize("kind", ["learned", "sinusoidal"])
def test_the_first_positions_as_a_slice_equal_the_lookup_values_and_gradients(kind: str) -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=259, block_size=16, n_layer=1, n_embd=8, n_head=2, pos=kind)
    handler = build_positions(cfg)
    sliced = handler.embed_first(12, torch.device("cpu"))
    looked_up = handler.embed(torch.arange(12)[None])
    assert sliced.shape == looked_up.shape == (1, 12, 8)
    torch.testing.assert_close(sliced, looked_up, rtol=0, atol=0)
    if kind == "learned":
        weights = torch.randn(1, 12, 8)
        (grad_slice,) = torch.autograd.grad((sliced * weights).sum(), handler.table.weight)
        (grad_lookup,) = torch.autograd.grad((looked_up * weights).sum(), handler.table.weight)
        torch.testing.assert_close(grad_slice, grad_lookup, rtol=0, atol=0)
        with pytest.raises(ValueError, match="position 16 was requested"):
            handler.embed_first(17, torch.device("cpu"))
    else:  # beyond the cached table: computed, as the lookup does
        torch.testing.assert_close(handler.embed_first(20, torch.device("cpu")),
                                   handler.embed(torch.arange(20)[None]))
