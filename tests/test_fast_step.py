"""The decoder's one-token step (`generation.fast_step`) against the model's own forward pass.

Every kind the step knows (attention with each position kind, QK-norm, biases, cross-attention read
from its cache; the RNN and GRU mixers) is stepped side by side with `model(tokens[:, None], state)` on
three lanes: the logits and the state after each step must agree. Whole completions (greedy and beam)
must be the same with the fast step and without it.
"""

from __future__ import annotations

import pytest
import torch

from seqlab.config import ModelConfig
from seqlab.data.tokenizer import ByteTokenizer
from seqlab.generation import decode
from seqlab.generation.complete import complete
from seqlab.generation.fast_step import FastStep
from seqlab.generation.phrases import PhraseBlend
from seqlab.models import build_model, record_attention
from seqlab.models.context_encoder import ContextBatch
from seqlab.models.kv_cache import KVCache
from tests.tiny_models import tiny_lm, token_ids

KNOWN = {
    "attn-rope": dict(mixer="attention", pos="rope"),
    "attn-learned": dict(mixer="attention", pos="learned"),
    "attn-sinusoidal": dict(mixer="attention", pos="sinusoidal"),
    "attn-alibi": dict(mixer="attention", pos="alibi"),
    "attn-none-bias-qknorm": dict(mixer="attention", pos="none", bias=True, qk_norm=True),
    "attn-rope-qknorm": dict(mixer="attention", pos="rope", qk_norm=True),
    "attn-no-mlp": dict(mixer="attention", pos="rope", mlp_ratio=0),
    "attn-cross": dict(mixer="attention", pos="rope", context="cross"),
    "rnn": dict(mixer="rnn", pos="none"),
    "gru": dict(mixer="gru", pos="none"),
    "gru-learned": dict(mixer="gru", pos="learned"),
    "gru-cross": dict(mixer="gru", pos="none", context="cross"),
}


def _model(name: str) -> torch.nn.Module:
    kw = {"mlp_ratio": 2, **KNOWN[name]}
    torch.manual_seed(0)
    return build_model(ModelConfig(vocab_size=37, block_size=16, n_layer=2, n_embd=16, n_head=2, **kw)).eval()


def _same_state(a: object, b: object) -> None:
    if isinstance(a, KVCache):
        assert isinstance(b, KVCache) and a.length == b.length
        torch.testing.assert_close(a.k[:, :, : a.length], b.k[:, :, : b.length], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(a.v[:, :, : a.length], b.v[:, :, : b.length], atol=1e-5, rtol=1e-5)
    else:
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("name", "prompt_len"), [(n, t) for n in sorted(KNOWN) for t in (5, 16)
                                                   if t < 16 or KNOWN[n]["pos"] != "learned"])
def test_fast_step_equals_the_model_step_by_step(name: str, prompt_len: int) -> None:
    """prompt_len 16 = block_size: the first step's position is one past RoPE's cached table (learned
    positions have no vector there)."""
    model = _model(name)
    fast = FastStep.of(model)
    assert fast is not None
    ctx = ContextBatch.from_lists([[3, 4, 5], [6], [7, 8, 9, 10]]) if model.cfg.reads_context else None
    prompt = token_ids(3, prompt_len)  # (B, T): three lanes
    with torch.inference_mode():
        _, state = model(prompt, context=ctx) if ctx is not None else model(prompt)
        ours, theirs = state.clone(), state.clone()
        assert fast.usable(ours)
        for t in range(6):
            tokens = token_ids(3, seed=10 + t)  # (B,)
            got, ours = fast(tokens, ours)
            want, theirs = model(tokens[:, None], state=theirs)
            torch.testing.assert_close(got, want[:, -1], atol=1e-5, rtol=1e-5)
            assert torch.equal(ours.pos, theirs.pos)
            for a, b in zip(ours.layers, theirs.layers):
                _same_state(a, b)


@pytest.mark.parametrize("mixer", ["mingru", "hybrid"])
def test_unknown_mixers_keep_the_model_step(mixer: str) -> None:
    assert FastStep.of(tiny_lm(mixer, "none")) is None


def test_wrappers_training_and_recorders_keep_the_model_step() -> None:
    model = tiny_lm("gru", "none")
    assert FastStep.of(PhraseBlend.__new__(PhraseBlend)) is None  # a wrapper may change forward
    fast = FastStep.of(model)
    assert fast is not None
    with torch.inference_mode():
        _, state = model(token_ids(1, 4))
    assert fast.usable(state) and not fast.usable(None)
    model.blocks[0].mixer.record_gates = True
    assert not fast.usable(state)
    model.blocks[0].mixer.record_gates = False
    model.train()
    assert not fast.usable(state)
    attn = tiny_lm("attention", "rope")
    fast = FastStep.of(attn)
    assert fast is not None
    with torch.inference_mode():
        _, state = attn(token_ids(1, 4))
    with record_attention():
        assert not fast.usable(state)


@pytest.mark.parametrize("name", ["attn-rope", "attn-learned", "gru", "rnn"])
@pytest.mark.parametrize("beam", [1, 3])
def test_completions_are_the_same_with_and_without_the_fast_step(
        name: str, beam: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Greedy and beam completions, past the attention window (block_size 16) so it slides mid-decode."""
    torch.manual_seed(3)  # the byte tokenizer needs 259 ids, more than tiny_lm's vocabulary
    model = build_model(ModelConfig(vocab_size=259, block_size=16, n_layer=2, n_embd=16, n_head=2, mlp_ratio=2,
                                    mixer=KNOWN[name]["mixer"], pos=KNOWN[name]["pos"])).eval()
    with torch.no_grad():
        model.wte.weight.mul_(40.0)  # sharpen the random model so its choices are not near-ties
    tok = ByteTokenizer()
    prompts = ["Dear Ann, the report ", "thanks for the notes on the", "x"]
    fast = [complete(model, tok, p, max_words=4, beam=beam, max_new_tokens=24) for p in prompts]
    monkeypatch.setattr(decode.FastStep, "of", classmethod(lambda cls, m: None))
    slow = [complete(model, tok, p, max_words=4, beam=beam, max_new_tokens=24) for p in prompts]
    assert [c.ids for c in fast] == [c.ids for c in slow]
    assert [c.text for c in fast] == [c.text for c in slow]
    for a, b in zip(fast, slow):
        assert a.confidence == pytest.approx(b.confidence, rel=1e-4, abs=1e-9)


def test_a_patched_block_keeps_the_model_step() -> None:
    """A block whose forward is not `Block.forward` (here: patched to double its output) is not one the
    step mirrors: the decoder keeps the model's step."""
    model = _model("attn-rope")
    block = model.blocks[1]
    real = block.forward

    def doubled(*args: object, **kwargs: object) -> tuple:
        x, state, cross = real(*args, **kwargs)
        return 2 * x, state, cross

    block.forward = doubled
    assert FastStep.of(model) is None
    assert FastStep.of(_model("attn-rope")) is not None
    with torch.inference_mode():
        _, state = model(token_ids(1, 4))
        dec = decode.IncrementalDecoder.resume(model, token_ids(1, 4), state, torch.zeros(1, 37), limit=16)
        assert dec.fast is None
        got = dec.step(torch.tensor([5]))
        want, _ = model(torch.tensor([[5]]), state=state.clone())
    torch.testing.assert_close(got, want[:, -1])
