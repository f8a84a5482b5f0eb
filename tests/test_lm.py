"""The LM shell beyond the contract of test_model_contract.py: cross-attention reads its context, weight
tying, every parameter gets a gradient, GPT-2 init, dropout only in training, and config validation."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tiny_models import V
from tiny_models import tiny_lm as _model
from tiny_models import token_ids as _ids

from seqlab.config import ModelConfig
from seqlab.models import MIXERS, build_model, record_attention


def test_cross_attention_reads_the_context() -> None:
    model = _model("attention", "none", context="cross")
    idx, ctx = _ids(2, 6), _ids(2, 5, seed=3)
    with torch.no_grad():
        by_ids, _ = model(idx, context=ctx)
        rows, _ = model.encode_context(ctx)  # (B, Lc, C) rows = ids through the context encoder
        by_rows, _ = model(idx, context=rows)
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
    assert rec.layers("context") == [0] and rec.get(0, "context").shape == (2, 2, 5, 5)  # the encoder
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
    model = _model(mixer, "learned", context="cross").train()
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
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.pos = "rope"  # type: ignore[misc]  # a config cannot be edited after validation
    with pytest.raises(ValueError, match="rope"):
        dataclasses.replace(cfg, pos="rope")  # a derived config is validated again
    with pytest.raises(ValueError, match="n_head=3"):
        dataclasses.replace(cfg, mixer="attention", n_head=3)
    with pytest.raises(ValueError, match="transformer"):
        dataclasses.replace(cfg, mixer="transformer")
    with pytest.raises(ValueError, match="ModelConfig"):
        build_model({"mixer": "rnn"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="model.context is none"):
        build_model(cfg)(_ids(1, 4), context=_ids(1, 3))
    model = build_model(dataclasses.replace(cfg, pos="learned", block_size=8))
    with pytest.raises(ValueError, match="block_size=8"):
        model(_ids(1, 9))
