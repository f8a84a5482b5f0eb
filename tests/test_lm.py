"""The LM shell for every mixer x position kind: causality, incremental decoding == full forward
(with reset flags and cross-attention), state operations, weight tying, init and config validation."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from seqlab.config import ModelConfig
from seqlab.models import LM, MIXERS, LMState, build_model, record_attention
from seqlab.models.lm import map_tensors

V, T = 37, 12
COMBOS = [("attention", p) for p in ("none", "learned", "sinusoidal", "rope", "alibi")] + [
    (m, p) for m in ("rnn", "gru", "mingru") for p in ("none", "learned", "sinusoidal")
]
CROSS = [("attention", "rope"), ("attention", "learned"), ("gru", "none"), ("mingru", "sinusoidal")]


def _model(mixer: str, pos: str, seed: int = 0, **kw: object) -> LM:
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=V, block_size=24, mixer=mixer, n_layer=2, n_embd=16, n_head=2, pos=pos,
                      mlp_ratio=2, **kw)  # type: ignore[arg-type]
    return build_model(cfg).eval()


def _ids(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, shape, generator=torch.Generator().manual_seed(seed))


def _feed(model: LM, idx: torch.Tensor, chunks: list[int], context: torch.Tensor | None = None,
          reset: torch.Tensor | None = None) -> torch.Tensor:
    """Logits of idx fed in pieces of the given sizes, carrying the state; context only on the first call."""
    outs, state, t = [], None, 0
    with torch.no_grad():
        for n in chunks:
            r = reset[:, t : t + n] if reset is not None else None
            logits, state = model(idx[:, t : t + n], state=state, context=context if t == 0 else None, reset=r)
            outs.append(logits)
            t += n
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("mixer,pos,cross", [(*c, False) for c in COMBOS] + [(*c, True) for c in CROSS])
def test_causal_and_incremental_equals_full(mixer: str, pos: str, cross: bool) -> None:
    model = _model(mixer, pos, cross_attention=cross)
    idx = _ids(2, T)
    ctx = _ids(2, 5, seed=7) if cross else None
    with torch.no_grad():
        full, state = model(idx, context=ctx)
    assert full.shape == (2, T, V) and isinstance(state, LMState) and state.pos.tolist() == [T, T]
    # causality: changing the tokens after t leaves the logits at positions <= t unchanged
    t = 5
    changed = idx.clone()
    changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % V
    with torch.no_grad():
        other, _ = model(changed, context=ctx)
    torch.testing.assert_close(other[:, : t + 1], full[:, : t + 1], atol=1e-6, rtol=0)
    assert not torch.allclose(other[:, t + 2 :], full[:, t + 2 :], atol=1e-4)  # the later ones do change
    # incremental decoding: one token at a time, and in uneven chunks, equals the full pass
    torch.testing.assert_close(_feed(model, idx, [1] * T, ctx), full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(_feed(model, idx, [5, 1, 4, 2], ctx), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "mixer,pos,fused",
    [(m, p, True) for m, p in COMBOS if m != "attention"] + [(m, "learned", False) for m in ("rnn", "gru")],
)
def test_reset_flags_for_recurrent_mixers(mixer: str, pos: str, fused: bool) -> None:
    model = _model(mixer, pos, fused_rnn=fused)
    idx = _ids(2, T)
    reset = torch.zeros(2, T, dtype=torch.bool)
    reset[0, 4] = True  # an email starts at t = 4 in lane 0, at t = 7 in lane 1
    reset[1, 7] = True
    with torch.no_grad():
        full, _ = model(idx, reset=reset)
        fresh0, _ = model(idx[:1, 4:])
        fresh1, _ = model(idx[1:, 7:])
        plain, _ = model(idx)
    # after a reset the lane behaves exactly like a fresh start: state zeroed, positions restart at 0
    torch.testing.assert_close(full[0, 4:], fresh0[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(full[1, 7:], fresh1[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(full[1, :7], plain[1, :7], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(full[0, 4:], plain[0, 4:], atol=1e-4)
    for chunks in ([1] * T, [3, 3, 6], [5, 7]):
        torch.testing.assert_close(_feed(model, idx, chunks, reset=reset), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mixer", ["attention", "gru"])
def test_state_index_select_detach_clone(mixer: str) -> None:
    model = _model(mixer, "learned")
    idx = _ids(3, 6)
    nxt = _ids(3, 1, seed=5)
    with torch.no_grad():
        full, _ = model(torch.cat([idx, nxt], 1))
        _, state = model(idx)
        order = torch.tensor([2, 0, 0])
        beam = state.index_select(order)  # beam search: lanes reordered and duplicated
        branch = state.clone()
        got, _ = model(nxt[order], state=beam)
        again, _ = model(nxt, state=branch)
    torch.testing.assert_close(got[:, 0], full[order, -1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(again[:, 0], full[:, -1], atol=1e-5, rtol=1e-5)
    model.train()
    _, state = model(idx)
    cut = state.detach()
    tensors: list[torch.Tensor] = []
    map_tensors(cut, lambda t: tensors.append(t) or t)
    assert tensors and not any(t.requires_grad for t in tensors)


def test_cross_attention_reads_the_context() -> None:
    model = _model("attention", "none", cross_attention=True)
    idx, ctx = _ids(2, 6), _ids(2, 5, seed=3)
    with torch.no_grad():
        by_ids, _ = model(idx, context=ctx)
        by_rows, _ = model(idx, context=model.wte(ctx))  # (B, Lc, C) rows = ids through the embedding
        other, _ = model(idx, context=_ids(2, 5, seed=4))
        without, _ = model(idx)  # no context: the cross branch is skipped
        padded_ctx = torch.cat([ctx, torch.zeros(2, 3, dtype=torch.long)], dim=1)
        keep = torch.arange(8).expand(2, 8) < 5
        padded, _ = model(idx, context=padded_ctx, context_mask=keep)
    torch.testing.assert_close(by_rows, by_ids)
    torch.testing.assert_close(padded, by_ids, atol=1e-5, rtol=1e-5)  # padding rows are never attended
    assert not torch.allclose(other, by_ids, atol=1e-4) and not torch.allclose(without, by_ids, atol=1e-4)
    with record_attention() as rec:
        model(idx, context=ctx)
    assert rec.layers("self") == [0, 1] and rec.layers("cross") == [0, 1]
    assert rec.get(1, "cross").shape == (2, 2, 6, 5)
    with pytest.raises(ValueError, match="context"):
        model(idx, context=torch.randn(2, 5, 7))


def test_weight_tying_and_num_params() -> None:
    tied = _model("attention", "rope")
    untied = _model("attention", "rope", tie_weights=False)
    assert tied.head.weight is tied.wte.weight
    assert untied.head.weight is not untied.wte.weight
    assert untied.num_params() - tied.num_params() == V * 16
    assert tied.num_params(non_embedding=True) == tied.num_params() - V * 16
    logits, _ = tied.train()(_ids(2, 5))
    logits.sum().backward()
    assert tied.wte.weight.grad is not None  # both uses flow into the one matrix


@pytest.mark.parametrize("mixer", ["attention", "gru", "mingru"])
def test_every_parameter_gets_a_gradient(mixer: str) -> None:
    model = _model(mixer, "learned", cross_attention=True).train()
    logits, _ = model(_ids(2, 8), context=_ids(2, 4, seed=2))
    torch.nn.functional.cross_entropy(logits.reshape(-1, V), _ids(16, seed=9)).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing


def test_gpt2_init_scales_residual_projections() -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=V, n_layer=4, n_embd=32, n_head=2, pos="none"))
    target = 0.02 / (2 * 4) ** 0.5
    for block in model.blocks:
        assert block.mlp.fc.weight.std().item() == pytest.approx(0.02, rel=0.1)
        assert block.mlp.proj.weight.std().item() == pytest.approx(target, rel=0.1)
        assert block.mixer.out_proj.weight.std().item() == pytest.approx(target, rel=0.15)
    assert model.wte.weight.std().item() == pytest.approx(0.02, rel=0.1)


def test_dropout_only_in_training() -> None:
    model = _model("attention", "rope", dropout=0.5)
    idx = _ids(2, 8)
    with torch.no_grad():
        a, b = model(idx)[0], model(idx)[0]
        torch.testing.assert_close(a, b)
        model.train()
        c, d = model(idx)[0], model(idx)[0]
    assert not torch.allclose(c, d)


def test_build_model_rejects_bad_combinations() -> None:
    assert set(MIXERS) == {"attention", "rnn", "gru", "mingru"}
    cfg = ModelConfig(vocab_size=V, mixer="rnn", pos="none", n_embd=16, n_head=2)
    bad = dataclasses.replace(cfg)
    bad.pos = "rope"  # edited after construction: build_model validates again
    with pytest.raises(ValueError, match="rope"):
        build_model(bad)
    bad = dataclasses.replace(cfg, mixer="attention")
    bad.n_head = 3
    with pytest.raises(ValueError, match="n_head=3"):
        build_model(bad)
    bad = dataclasses.replace(cfg)
    bad.mixer = "transformer"
    with pytest.raises(ValueError, match="transformer"):
        build_model(bad)
    with pytest.raises(ValueError, match="ModelConfig"):
        build_model({"mixer": "rnn"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cross_attention"):
        build_model(cfg)(_ids(1, 4), context=_ids(1, 3))
    model = build_model(dataclasses.replace(cfg, pos="learned", block_size=8))
    with pytest.raises(ValueError, match="block_size=8"):
        model(_ids(1, 9))
