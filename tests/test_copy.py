"""The copy head (models/copy.py): a pointer over the context mixed into the next-token distribution.

Incremental decoding against the full pass, normalization in float64, the gate forced to 1 against the
same weights without a copy head, an empty context against no context (exactly), a hand-built pointer
whose mixture is worked out by hand, the config's refusals, and training a copy model end to end."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from stepping import decoder_against_full, one_token_at_a_time
from tiny_models import tiny_lm as _model
from tiny_models import token_ids as _ids

from seqlab.cli.main import main
from seqlab.config import ModelConfig, apply_overrides, get_preset
from seqlab.models import build_model, record_attention
from seqlab.models.context_encoder import ContextBatch
from seqlab.models.copy import CopyHead, PointerKeys
from seqlab.training.trainer import train

# (mixer, pos, the context read besides the copy head, ctx_layers): the pointer beside cross-attention or
# initial states, or alone on encoded rows or on the cheap keys (embeddings + positions, no encoder layer)
VARIANTS = [("attention", "rope", "cross", 1), ("attention", "rope", "pointer", 0), ("gru", "none", "init_state", 1),
            ("gru", "none", "pointer", 1), ("mingru", "learned", "pointer", 0)]


def _with_copy(mode: str) -> str:
    """The model.context of a copy head beside `mode` (cross, init_state), or alone (pointer)."""
    return mode if mode == "pointer" else f"{mode}+copy"


def _copy_model(mixer: str, pos: str, mode: str, layers: int, **kw: object):  # noqa: ANN202 (an LM)
    return _model(mixer, pos, context=_with_copy(mode), ctx_layers=layers, ctx_block_size=8, **kw).double()


def _contexts() -> ContextBatch:
    """Three lanes: a 10-token context (cut to its last 8), a 3-token one (padded), and none at all."""
    return ContextBatch.from_lists([_ids(10, seed=11).tolist(), _ids(3, seed=12).tolist(), []])


@pytest.mark.parametrize("mixer,pos,mode,layers", VARIANTS)
def test_incremental_decoding_with_a_copy_head_equals_the_full_pass(mixer: str, pos: str, mode: str,
                                                                    layers: int) -> None:
    model = _copy_model(mixer, pos, mode, layers)
    idx, ctx = _ids(3, 10, seed=2), _contexts()
    with torch.no_grad():
        full, _ = model(idx, context=ctx)
    stepped, state = one_token_at_a_time(model, idx, ctx)
    assert state.copy is not None  # the pointer's keys are kept in the state, computed once
    torch.testing.assert_close(stepped, full, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("mixer,pos,mode,layers", VARIANTS)
def test_the_mixture_is_a_distribution_and_reads_the_context(mixer: str, pos: str, mode: str, layers: int) -> None:
    model = _copy_model(mixer, pos, mode, layers)
    idx, ctx = _ids(3, 9, seed=4), _contexts()
    with torch.no_grad():
        with_ctx, _ = model(idx, context=ctx)
        without, _ = model(idx)
    assert with_ctx.dtype == torch.float64
    torch.testing.assert_close(with_ctx.exp().sum(-1), torch.ones(3, 9, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(without.exp().sum(-1), torch.ones(3, 9, dtype=torch.float64), atol=1e-12, rtol=0)
    assert not torch.allclose(with_ctx[:2], without[:2], atol=1e-4)  # the pointer reads the context
    # lane 2 has an empty context: g = 1 exactly, the vocabulary distribution bit for bit
    assert torch.equal(with_ctx[2], without[2]) if mode == "pointer" else torch.allclose(with_ctx[2], without[2])


@pytest.mark.parametrize("mixer,pos,mode,layers", VARIANTS)
def test_the_gate_at_one_gives_the_model_without_copy(mixer: str, pos: str, mode: str, layers: int) -> None:
    """Same weights, copy head removed: with g forced to 1 the copy model's log p is the plain model's
    log_softmax (for model.context=pointer the plain model reads no context; otherwise it reads it as the
    copy model's blocks do)."""
    model = _copy_model(mixer, pos, mode, layers)
    plain = _model(mixer, pos, context="none" if mode == "pointer" else mode, ctx_layers=layers,
                   ctx_block_size=8).double()
    weights = {k: v for k, v in model.state_dict().items()
               if not k.startswith("copy_head.") and (mode != "pointer" or not k.startswith("ctx_encoder."))}
    plain.load_state_dict(weights)
    idx, ctx = _ids(3, 9, seed=5), _contexts()
    with torch.no_grad():
        model.copy_head.gate.bias.fill_(math.inf)  # sigmoid(inf) = 1: generate, never copy
        got, _ = model(idx, context=ctx)
        want, _ = plain(idx, context=None if mode == "pointer" else ctx)
    torch.testing.assert_close(got, torch.log_softmax(want, dim=-1), atol=1e-12, rtol=0)


def test_a_hand_built_pointer_gives_the_mixture_worked_by_hand() -> None:
    """Zero queries: the pointer spreads evenly over the 3 real context tokens [3, 5, 3] (the fourth is
    padding), so p_c(3) = 2/3, p_c(5) = 1/3; zero logits give p_v = 1/8; the gate's bias log 3 gives
    g = 3/4. Then p(3) = 3/32 + 1/6, p(5) = 3/32 + 1/12, any other token 3/32."""
    cfg = ModelConfig(vocab_size=8, n_embd=4, n_head=1, context="cross+copy")
    head = CopyHead(cfg).double()
    with torch.no_grad():
        head.query.weight.zero_()
        head.gate.weight.zero_()
        head.gate.bias.fill_(math.log(3.0))
    rows = torch.randn(1, 4, 4, dtype=torch.float64)
    ptr = PointerKeys.build(torch.randn(1, 4, 4, dtype=torch.float64), rows, torch.tensor([[3, 5, 3, 0]]),
                            torch.tensor([[True, True, True, False]]))
    h, logits = torch.randn(1, 2, 4, dtype=torch.float64), torch.zeros(1, 2, 8, dtype=torch.float64)
    with record_attention() as rec:
        p = head(h, logits, ptr, ptr.keep).exp()
    want = torch.full((8,), 3 / 32, dtype=torch.float64)
    want[3], want[5] = 3 / 32 + 1 / 6, 3 / 32 + 1 / 12
    torch.testing.assert_close(p, want.expand(1, 2, 8), atol=1e-15, rtol=0)
    # the recorder sees the pointer as one head after the last block: (B, 1, T, S) rows summing to 1
    weights = rec.get(cfg.n_layer, "pointer")
    torch.testing.assert_close(weights[0, 0], torch.tensor([[1 / 3, 1 / 3, 1 / 3, 0.0]] * 2, dtype=torch.float64))


def test_each_email_of_a_chunk_copies_only_from_its_own_context() -> None:
    """A recurrent chunk that holds two emails (segment 0 then 1) and a stretch with no context (-1):
    positions of email 1 copy only tokens of context 1; the stretch without one is the vocabulary alone."""
    model = _copy_model("gru", "none", "pointer", 0)
    ids = torch.tensor([[[1, 2, 3, 0], [7, 8, 9, 10]]])  # (B=1, E=2, Lc=4)
    keep = torch.tensor([[[True, True, True, False], [True] * 4]])
    segment = torch.tensor([[0, 0, 0, 1, 1, 1, -1, -1]])
    idx = _ids(1, 8, seed=6)
    with torch.no_grad(), record_attention() as rec:
        out, _ = model(idx, context=ContextBatch(ids, keep, segment))
        plain, _ = model(idx)
    a = rec.get(model.cfg.n_layer, "pointer")[0, 0]  # (T, S=8)
    assert torch.all(a[:3, 4:] == 0) and torch.all(a[3:6, :4] == 0) and torch.all(a[6:] == 0)
    torch.testing.assert_close(a[:6].sum(-1), torch.ones(6, dtype=torch.float64))
    assert torch.equal(out[0, 6:], plain[0, 6:])


def test_an_old_context_override_names_the_new_spelling(tiny_data_dir: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    """model.copy, model.cross_attention and model.ctx_mode became model.context: a user error says so."""
    code = main(["train", str(tiny_data_dir), "--out", str(tmp_path / "run"), "--preset", "tiny", "model.copy=true"])
    err = capsys.readouterr().err
    assert code == 2 and "model.copy is now part of model.context" in err and "cross+copy" in err
    assert not (tmp_path / "run").exists()


def test_a_copy_head_reads_token_ids() -> None:
    model = _copy_model("attention", "rope", "pointer", 0)
    with pytest.raises(ValueError, match="token ids"):
        model(_ids(1, 3), context=torch.randn(1, 4, 16, dtype=torch.float64))


@pytest.mark.parametrize("mixer", ["attention", "gru"])
def test_a_copy_model_trains_and_its_loss_falls(tiny_data_dir: Path, tmp_path: Path, mixer: str) -> None:
    """Windows (attention) and streams with per-email contexts (GRU) through the trainer: finite, falling."""
    import json

    over = [f"model.mixer={mixer}", "model.pos=none", "model.context=pointer", "model.ctx_layers=0",
            "model.ctx_block_size=32", "train.max_steps=12",
            "train.eval_every=6", "train.threads=1"]
    summary = train(tiny_data_dir, tmp_path / mixer, apply_overrides(get_preset("tiny"), over), progress=False)
    assert summary["steps"] == 12 and not summary["failed"]
    val = [r["val_loss"] for r in map(json.loads, (tmp_path / mixer / "metrics.jsonl").read_text().splitlines())
           if "val_loss" in r]
    assert len(val) == 2 and all(math.isfinite(x) for x in val) and val[1] < val[0]


@pytest.mark.parametrize("mode", ["cross", "pointer"])
def test_the_attention_view_shows_the_pointer(tmp_path: Path, mode: str) -> None:
    """`attention --reply-to` on a copy model: the pointer's weights are one more row (after any
    cross-attention layers), the recorded pointer rows, and the HTML names it."""
    from seqlab.data.tokenizer import ByteTokenizer
    from seqlab.inspection.cross import Section, cross_attention_maps, cross_figure, cross_tables
    from seqlab.inspection.figures import png_bytes
    from seqlab.inspection.html import page

    tok, original = ByteTokenizer(), "Shall we meet in room 5 on Tuesday?"
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=tok.vocab_size, mixer="gru", pos="none", n_layer=2, n_embd=16,
                                    n_head=2, context=_with_copy(mode))).eval()
    maps = cross_attention_maps(model, tok, "Yes, room 5", original)
    assert maps.pointer == 2 and maps.layers == ([0, 1, 2] if mode == "cross" else [2])
    w = maps.weights[(2, 0)]
    assert w.shape == (len(maps.labels), len(original))
    np.testing.assert_allclose(w.sum(1), 1.0, rtol=1e-5)
    ids = torch.tensor([[tok.bos_id, *tok.encode("Yes, room 5")]])
    with torch.no_grad(), record_attention() as rec:
        model(ids, context=ContextBatch.from_lists([tok.encode(original)]))
    np.testing.assert_allclose(w, rec.get(2, "pointer")[0, 0].numpy())
    html = page("x", [Section("s", png_bytes(cross_figure(maps)), cross_tables(maps), "")])
    assert "pointer (copy head)" in html


def test_the_decoder_steps_a_copy_model_through_its_forward() -> None:
    """generation's decoder (what `complete --reply-to` and the server use) on a copy model: no FastStep
    (it does not know the copy head), and its stepped logits equal the full pass with the original."""
    from seqlab.data.tokenizer import ByteTokenizer
    from seqlab.generation.fast_step import FastStep
    from seqlab.generation.reply import reply_context

    tok = ByteTokenizer()
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=tok.vocab_size, mixer="attention", n_layer=2, n_embd=16, n_head=2,
                                    context="pointer", ctx_layers=0)).eval()
    assert FastStep.of(model) is None
    ctx = reply_context(model, tok, "Shall we meet in room 5 on Tuesday?")
    prompt = torch.tensor([[tok.bos_id, *tok.encode("Yes, room 5 on Tue")]])
    decoder_against_full(model, prompt, ctx)


@pytest.mark.parametrize("mixer,pos,mode", [("attention", "rope", "pointer"), ("gru", "none", "init_state")])
def test_the_server_keeps_a_copy_models_state_per_original(mixer: str, pos: str, mode: str) -> None:
    """The server's kept session (tokens fed as typed, state kept with the pointer's keys) answers as a
    fresh session and as `complete` with the original, and its next-token logits equal one full pass."""
    from seqlab.data.tokenizer import ByteTokenizer
    from seqlab.generation.complete import complete, encode_prompt
    from seqlab.generation.reply import reply_context
    from seqlab.serving.engine import CompletionEngine, prompt_text

    tok, original = ByteTokenizer(), "Could you send me the budget report before Friday? Room 5."
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=tok.vocab_size, block_size=64, mixer=mixer, pos=pos, n_layer=2,
                                    n_embd=32, n_head=2, context=_with_copy(mode))).eval()
    with torch.no_grad():
        model.copy_head.gate.bias.fill_(-2.0)  # mostly copy: the original decides the suggestion
    kept, fresh = CompletionEngine(model, tok), CompletionEngine(model, tok)
    for engine in (kept, fresh):  # the model's own answers: the server's copier of names left out
        engine.weights["reply"] = 0.0
    ctx = reply_context(model, tok, original)
    for n in (5, 17, 29):
        body = "Hi, sure, the budget report"[:n]
        a = kept.complete(body, "Re: budget", session="w", context=original)
        b = fresh.complete(body, "Re: budget", session=f"new{n}", context=original)
        c = complete(model, tok, prompt_text("Re: budget", body), max_words=3, context=ctx)
        assert a.text == b.text == c.text
        ids, _, _ = encode_prompt(tok, prompt_text("Re: budget", body))
        with torch.no_grad():
            full, _ = model(torch.tensor([ids]), context=ctx)
        reused = kept.sessions.get("w")
        assert reused is not None and reused.state.copy is not None
        torch.testing.assert_close(reused.logits, full[:, -1].float(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mode", ["cross", "pointer"])
def test_under_bf16_autocast_the_mixture_is_float32_and_normalized(mode: str) -> None:
    """train.precision=bf16 runs the forward under CPU autocast: the copy head still returns a float32
    log-distribution (sums to 1 to float32 rounding), close to the fp32 one, with finite gradients."""
    torch.manual_seed(0)
    model = _model("attention", "rope", context=_with_copy(mode), ctx_block_size=8).train()
    idx, ctx = _ids(3, 9, seed=4), _contexts()
    want, _ = model(idx, context=ctx)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, _ = model(idx, context=ctx)
    assert got.dtype == torch.float32 and torch.isfinite(got).all()
    torch.testing.assert_close(got.exp().sum(-1), torch.ones(3, 9), atol=1e-5, rtol=0)
    torch.testing.assert_close(got.exp(), want.exp(), atol=0.02, rtol=0)
    torch.nn.functional.cross_entropy(got.flatten(0, 1), _ids(27, seed=8)).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
