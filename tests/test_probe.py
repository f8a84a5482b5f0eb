"""probe: attention maps, the soft-lookup table, GRU gates and position tables, each checked against a
second computation (the lecture's worked numbers, the module's own output, PyTorch's fused GRU)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from seqlab.config import ModelConfig
from seqlab.data.prepare.tokenizer_fit import fit_tokenizer
from seqlab.data.tokenizer import ByteTokenizer
from seqlab.errors import UserError
from seqlab.inspection import probes as probe
from seqlab.models import build_model
from seqlab.models.positional import alibi_slopes
from seqlab.runs.load import load_run

TEXT = "Hi Bob,\nplease send the report before Friday."


@pytest.fixture(scope="module")
def attn_run(tiny_run_dir: Path):
    model, tok, _ = load_run(tiny_run_dir, device="cpu")
    return model, tok


def _model(pos: str, mixer: str = "attention", n_layer: int = 2) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(ModelConfig(block_size=24, n_layer=n_layer, n_embd=16, n_head=2, pos=pos, mixer=mixer,
                                   mlp_ratio=2)).eval()


# ------------------------------------------------------------------ attention maps


def test_attention_maps_are_causal_rows_of_weights(attn_run) -> None:
    model, tok = attn_run
    maps = probe.attention_maps(model, tok, "Thanks, see you")
    n = len(tok.encode("Thanks, see you")) + 1  # + <bos>
    assert maps.cropped == 0 and maps.note == ""
    assert len(maps.labels) == len(maps.ids) == n and maps.labels[0] == "<bos>"
    assert set(maps.weights) == {(layer, h) for layer in range(model.cfg.n_layer) for h in range(model.cfg.n_head)}
    for w in maps.weights.values():
        assert w.shape == (n, n)
        np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-5)
        assert np.all(np.triu(w, k=1) == 0.0)  # exactly zero on future keys
        assert np.all(np.diag(w) > 0.0)


def test_attention_maps_choose_layer_and_head(attn_run) -> None:
    model, tok = attn_run
    maps = probe.attention_maps(model, tok, TEXT, layers=0, heads=[1])
    assert list(maps.weights) == [(0, 1)] and maps.layers == [0] and maps.heads == [1]
    with pytest.raises(UserError, match="head 5 does not exist"):
        probe.attention_maps(model, tok, TEXT, heads=5)
    with pytest.raises(UserError, match="layer 3 does not exist"):
        probe.attention_maps(model, tok, TEXT, layers=3)


def test_attention_maps_crop_to_the_last_block(attn_run) -> None:
    model, tok = attn_run
    long = "word " * 20  # 100 bytes > block_size 32
    maps = probe.attention_maps(model, tok, long)
    full = [tok.bos_id, *tok.encode(long)]
    assert len(maps.ids) == model.cfg.block_size
    assert maps.ids == full[-model.cfg.block_size:]
    assert maps.cropped == len(full) - model.cfg.block_size
    assert "cropped" in maps.note and str(maps.cropped) in maps.note


def test_attention_maps_refuse_bad_input(attn_run, gru_run_dir: Path) -> None:
    model, tok = attn_run
    for empty in ("", "  \n"):
        with pytest.raises(UserError, match="empty"):
            probe.attention_maps(model, tok, empty)
    gru, gtok, _ = load_run(gru_run_dir, device="cpu")
    with pytest.raises(UserError, match="without self-attention"):
        probe.attention_maps(gru, gtok, TEXT)
    with pytest.raises(UserError, match="without self-attention"):
        probe.soft_lookup(gru, gtok, TEXT)


# ------------------------------------------------------------------ token labels


def test_token_labels_make_whitespace_and_split_characters_visible() -> None:
    tok = ByteTokenizer()
    ids = [tok.bos_id, *tok.encode("a b\n\tcé€"), 0xFF, tok.eos_id]
    labels = probe.token_labels(tok, ids)
    assert labels == ["<bos>", "a", "␣", "b", "⏎", "⇥", "c", "<c3>", "é",  # é = c3 a9: shown where complete
                      "<e2>", "<e282>", "€", "\ufffd", "<eos>"]


def test_token_labels_show_bpe_merges_whole() -> None:
    texts = ["please send the report", "please send the slides", "send the report please"] * 20
    tok = fit_tokenizer("bpe", texts, vocab_size=300)
    ids = tok.encode("please send the report")
    labels = probe.token_labels(tok, ids)
    assert len(labels) == len(ids) < len("please send the report")  # merged tokens
    assert "".join(labels).replace("␣", " ") == "please send the report"


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=40))
def test_token_labels_one_visible_label_per_token(text: str) -> None:
    tok = ByteTokenizer()
    ids = tok.encode(text)
    labels = probe.token_labels(tok, ids)
    assert len(labels) == len(ids)
    assert all(label and label.isprintable() and not label.isspace() for label in labels)


# ------------------------------------------------------------------ soft lookup


def test_lookup_math_reproduces_the_lecture_table() -> None:
    # lecture slide "One weighted combination uses values, not token IDs": please / send / the
    q = torch.tensor([1.0])
    k = torch.tensor([[0.0], [math.log(2)], [math.log(3)]])
    v = torch.tensor([[1.0, 0.0], [0.0, 2.0], [2.0, 2.0]])
    m = probe.lookup_math(q, k, v)
    np.testing.assert_allclose(m.scores, [0.0, math.log(2), math.log(3)], atol=1e-6)
    np.testing.assert_allclose(m.weights, [1 / 6, 2 / 6, 3 / 6], atol=1e-6)
    np.testing.assert_allclose(m.output, [7 / 6, 5 / 3], atol=1e-6)
    np.testing.assert_allclose(m.contributions, [[1 / 6, 0.0], [0.0, 4 / 6], [1.0, 1.0]], atol=1e-6)
    np.testing.assert_allclose(m.norms, [1 / 6, 4 / 6, math.sqrt(2)], atol=1e-6)
    np.testing.assert_allclose(m.shares.sum(), 1.0, atol=1e-12)
    assert m.bias is None


def test_lookup_math_scales_by_sqrt_dk_and_adds_the_bias() -> None:
    q = torch.tensor([1.0, 1.0, 1.0, 1.0])
    k = torch.tensor([[2.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    v = torch.eye(2)
    m = probe.lookup_math(q, k, v, bias=torch.tensor([0.0, 1.0]))
    np.testing.assert_allclose(m.scores, [1.0, 0.0])  # 2 / sqrt(4)
    np.testing.assert_allclose(m.weights, [0.5, 0.5])  # the bias of 1 evens the scores out
    np.testing.assert_allclose(m.bias, [0.0, 1.0])


@pytest.mark.parametrize("pos", ["rope", "alibi", "learned", "none"])
def test_soft_lookup_sums_to_the_heads_output(pos: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(pos)
    tok = ByteTokenizer()
    calls = []
    shared = probe.lookup_math
    monkeypatch.setattr(probe, "lookup_math", lambda *a, **kw: calls.append(1) or shared(*a, **kw))
    for query, layer, head in ((-1, 1, 1), (7, 0, 0), (3, 1, 0)):
        lk = probe.soft_lookup(model, tok, TEXT, query, layer, head)
        n = lk.query_pos + 1
        assert len(lk.labels) == n and lk.math.weights.shape == (n,)
        np.testing.assert_allclose(lk.math.output, lk.head_output, atol=1e-5)  # sum_j a_j v_j == module output
        np.testing.assert_allclose(lk.math.contributions.sum(axis=0), lk.head_output, atol=1e-5)
        np.testing.assert_allclose(lk.math.weights, lk.recorded_weights, atol=1e-6)
        np.testing.assert_allclose(lk.math.weights.sum(), 1.0, atol=1e-9)
        if pos == "alibi":  # bias -m_h |i - j| of Press et al. 2022
            dist = lk.query_pos - np.arange(n)
            np.testing.assert_allclose(lk.math.bias, -alibi_slopes(2)[head].item() * dist, atol=1e-6)
        else:
            assert lk.math.bias is None
    assert len(calls) == 3  # soft_lookup goes through the very function the lecture test checks


def test_soft_lookup_rows_match_the_attention_map(attn_run) -> None:
    model, tok = attn_run
    maps = probe.attention_maps(model, tok, TEXT)
    for query in (0, 5, len(maps.ids) - 1):
        lk = probe.soft_lookup(model, tok, TEXT, query, 0, 1)
        np.testing.assert_allclose(lk.math.weights, maps.weights[(0, 1)][query, : query + 1], atol=1e-6)
        np.testing.assert_allclose(lk.math.output, lk.head_output, atol=1e-5)
    first = probe.soft_lookup(model, tok, "Hi Bob", 0)
    assert first.cropped == 0 and first.query_label == "<bos>" and first.math.weights.tolist() == [1.0]


def test_soft_lookup_refuses_positions_outside_the_text(attn_run) -> None:
    model, tok = attn_run
    n = len(tok.encode("hello")) + 1
    assert probe.soft_lookup(model, tok, "hello", -n).query_pos == 0
    for bad in (n, -n - 1):
        with pytest.raises(UserError, match="outside the text"):
            probe.soft_lookup(model, tok, "hello", bad)


# ------------------------------------------------------------------ GRU gates


def test_gru_gates_match_pytorchs_fused_gru(gru_run_dir: Path) -> None:
    model, tok, _ = load_run(gru_run_dir, device="cpu")
    labels, r, z = probe.gru_gates(model, tok, TEXT)
    n, c = len(tok.encode(TEXT)) + 1, model.cfg.n_embd
    assert len(labels) == n and r.shape == z.shape == (n, c)
    assert r.min() >= 0.0 and r.max() <= 1.0 and z.min() >= 0.0 and z.max() <= 1.0
    mixer = model.blocks[0].mixer
    assert mixer.record_gates is False  # put back as it was
    # second computation: run the fused torch.nn.GRU kernel, then recompute r_t, z_t from its states
    seen = {}
    hook = mixer.register_forward_hook(lambda m, a, out: seen.update(x=a[0], h=out[0]))
    with torch.no_grad():
        model(torch.tensor([[tok.bos_id, *tok.encode(TEXT)]]))
    hook.remove()
    cell = mixer.cell
    x, h = seen["x"][0], seen["h"][0]  # (L, C) each
    h_prev = torch.cat((torch.zeros(1, c), h[:-1]))  # h_{t-1}, zeros before the first token
    with torch.no_grad():
        gi = F.linear(x, cell.weight_ih_l0, cell.bias_ih_l0)  # (L, 3C), PyTorch's gate order r, z, n
        gh = F.linear(h_prev, cell.weight_hh_l0, cell.bias_hh_l0)
    np.testing.assert_allclose(r, torch.sigmoid(gi[:, :c] + gh[:, :c]).numpy(), atol=1e-5)
    np.testing.assert_allclose(z, torch.sigmoid(gi[:, c: 2 * c] + gh[:, c: 2 * c]).numpy(), atol=1e-5)


def test_gru_gates_refuse_other_models(attn_run) -> None:
    model, tok = attn_run
    with pytest.raises(UserError, match="no GRU layer"):
        probe.gru_gates(model, tok, TEXT)
    with pytest.raises(UserError, match="no GRU layer"):
        probe.gru_gates(_model("none", mixer="rnn", n_layer=1), ByteTokenizer(), TEXT)


# ------------------------------------------------------------------ positions


def test_sinusoidal_table_follows_the_formula() -> None:
    pe = probe.sinusoidal_table(50, 16)
    assert pe.shape == (50, 16)
    for p, i in ((0, 0), (7, 2), (49, 7)):
        angle = p / 10000 ** (2 * i / 16)
        assert pe[p, 2 * i] == pytest.approx(math.sin(angle), abs=1e-5)
        assert pe[p, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-5)
    with pytest.raises(UserError):
        probe.sinusoidal_table(0, 16)


def test_learned_position_similarity_is_pairwise_cosine() -> None:
    model = _model("learned")
    sim = probe.learned_position_similarity(model)
    table = model.pos.table.weight.detach()
    expected = F.cosine_similarity(table[:, None, :], table[None, :, :], dim=-1)  # (P, P)
    assert sim.shape == (24, 24)
    np.testing.assert_allclose(sim, expected.numpy(), atol=1e-5)
    np.testing.assert_allclose(np.diag(sim), 1.0, atol=1e-9)
    with pytest.raises(UserError, match="no learned position"):
        probe.learned_position_similarity(_model("rope"))
