"""The hybrid family (models/hybrid.py): local attention against an explicit per-query computation,
incremental decoding against the full pass (with email resets inside the chunks), the config rules and
presets, and the data mode the trainer picks for it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from seqlab.config import ModelConfig, apply_overrides, get_preset
from seqlab.models import build_model
from seqlab.models.hybrid import LocalAttention
from seqlab.studies.recipes import apply_recipe
from tests.tiny_models import V, token_ids


def _hybrid(cell: str = "gru", pattern: str = "rra", window: int = 5, **kw: object) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=V, block_size=16, mixer="hybrid", pos="none", n_layer=3, n_embd=16, n_head=2,
                      mlp_ratio=2, hybrid_pattern=pattern, hybrid_cell=cell, attn_window=window,
                      **kw)  # type: ignore[arg-type]
    return build_model(cfg).eval()


def _resets(b: int, t: int) -> torch.Tensor:
    reset = torch.zeros(b, t, dtype=torch.bool)
    reset[:, 0] = True
    reset[1, 7] = True  # lane 1 starts its next email at 7, lane 2 at 12 and 13
    reset[2, 12] = reset[2, 13] = True
    return reset


def test_local_attention_equals_an_explicit_window_per_query() -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=V, mixer="hybrid", pos="none", n_embd=16, n_head=2, attn_window=4, qk_norm=True)
    att = LocalAttention(cfg).eval()
    b, t, window = 3, 15, 4
    x, reset = torch.randn(b, t, 16), _resets(b, t)
    y, _ = att(x, reset=reset)
    q = att.q_norm(att._heads(att.q_proj(x)))  # (B, H, T, D)
    k, v = (att._heads(z) for z in att.kv_proj(x).split(16, dim=-1))
    k = att.k_norm(k)
    doc = reset.long().cumsum(1)  # (B, T)
    heads = torch.zeros(b, 2, t, 8)
    for lane in range(b):
        for i in range(t):
            seen = [j for j in range(max(0, i - window + 1), i + 1) if doc[lane, j] == doc[lane, i]]
            s = torch.stack([(q[lane, :, i] * k[lane, :, j]).sum(-1) for j in seen], dim=-1) / math.sqrt(8)  # (H, n)
            heads[lane, :, i] = (s.softmax(-1)[:, :, None] * v[lane][:, seen]).sum(1)  # (H, n, 1) * (H, n, D)
    assert torch.allclose(y, att._merge(heads), atol=1e-5)


@pytest.mark.parametrize("cell", ["gru", "mingru"])
@pytest.mark.parametrize("chunks", [[1] * 20, [7, 1, 5, 7], [3, 17]], ids=["token_by_token", "uneven", "long"])
def test_incremental_equals_the_full_pass(cell: str, chunks: list[int]) -> None:
    model = _hybrid(cell, qk_norm=True)
    idx, reset = token_ids(3, 20), _resets(3, 20)
    with torch.no_grad():
        full, _ = model(idx, reset=reset)
        state, outs, start = None, [], 0
        for n in chunks:
            logits, state = model(idx[:, start:start + n], state=state, reset=reset[:, start:start + n])
            outs.append(logits)
            start += n
    assert torch.allclose(torch.cat(outs, dim=1), full, atol=1e-5)
    attn_state = state.layers[2]  # bounded: at most window - 1 keys and values
    assert attn_state["k"].shape[2] == 4 and attn_state["doc"].shape == (3, 4)


def test_the_pattern_tiles_over_the_layers_and_is_checked() -> None:
    model = _hybrid(pattern="ra")
    assert [type(b.mixer).__name__ for b in model.blocks] == ["RecurrentMixer", "LocalAttention", "RecurrentMixer"]
    with pytest.raises(ValueError, match="hybrid_pattern"):
        ModelConfig(mixer="hybrid", pos="none", n_layer=2, hybrid_pattern="rra")  # "rr": no attention layer
    with pytest.raises(ValueError, match="hybrid_pattern"):
        ModelConfig(mixer="hybrid", pos="none", hybrid_pattern="rx")
    with pytest.raises(ValueError, match="acts inside attention"):
        ModelConfig(mixer="hybrid", pos="rope")


@pytest.mark.parametrize("preset", ["tiny", "small", "base"])
def test_every_preset_gives_the_hybrid_a_valid_config(preset: str) -> None:
    cfg = apply_overrides(get_preset(preset), ["model.mixer=hybrid"])
    assert cfg.model.pos == "none" and set(cfg.model.layer_kinds()) == {"r", "a"}
    assert cfg.data.resolved_mode(cfg.model.mixer) == "stream"  # it carries recurrent state
    assert apply_recipe(get_preset(preset), "hybrid").model == cfg.model
    with pytest.raises(ValueError, match="hybrid_pattern"):  # an explicit depth is not changed behind one's back
        apply_overrides(get_preset("tiny"), ["model.mixer=hybrid", "model.n_layer=1"])


def test_a_hybrid_trains_on_streams_and_its_state_is_saved(tiny_data_dir: Path, tmp_path: Path) -> None:
    from seqlab.training.trainer import train

    cfg = apply_recipe(get_preset("tiny"), "hybrid", ["train.max_steps=6", "train.threads=1", "model.attn_window=8"])
    summary = train(tiny_data_dir, tmp_path / "run", cfg, progress=False)
    assert summary["steps"] == 6 and not summary["failed"]
    state = torch.load(tmp_path / "run" / "trainer_state.pt", weights_only=True)
    assert state["data_position"]["mode"] == "stream" and isinstance(state["stream_state"]["layers"][1], dict)
