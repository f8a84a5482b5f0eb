"""The recurrent families' second way of reading a context (`model.context=init_state`, models/context_encoder.py
`ContextInit`): each recurrent layer starts an email from a state projected from the pooled context.

Compared: incremental decoding and the full pass; the fused GRU kernel and the gate-by-gate loop, and
minGRU's scan and its sequential loop (values and gradients); a stream chunk holding two emails and the
two emails fed apart; an empty context and no context; a resumed training run and an uninterrupted one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from stepping import decoder_against_full
from tiny_models import V
from tiny_models import tiny_lm as _model
from tiny_models import token_ids as _ids

from seqlab.cli.main import main
from seqlab.config import ModelConfig, apply_overrides, get_preset
from seqlab.models import build_model
from seqlab.models.context_encoder import ContextBatch
from seqlab.training.trainer import train

FAMILIES = [("gru", "none"), ("rnn", "none"), ("mingru", "learned"), ("hybrid", "none")]


def _init_model(mixer: str, pos: str, seed: int = 0, **kw: object):  # noqa: ANN202 (an LM)
    model = _model(mixer, pos, seed=seed, context="init_state", **kw)
    with torch.no_grad():  # trained-sized projections: GPT-2's N(0, 0.02) init would barely move the state
        for proj in model.ctx_init.proj.values():
            proj.weight.normal_(0.0, 0.5)
            proj.bias.normal_(0.0, 0.5)
        model.ctx_init.query.normal_(0.0, 1.0)
    return model


def _contexts() -> ContextBatch:
    """Three lanes: a 6-token context, a 2-token one (padded), and none at all."""
    return ContextBatch.from_lists([_ids(6, seed=11).tolist(), _ids(2, seed=12).tolist(), []])


def test_init_state_builds_no_cross_attention() -> None:
    model = _init_model("hybrid", "none")
    assert all(b.xattn is None for b in model.blocks)
    assert sorted(model.ctx_init.proj) == ["0"]  # the hybrid's r layer; its local attention layer has no state


@pytest.mark.parametrize("mixer,pos", FAMILIES)
def test_incremental_decoding_with_an_initial_state_equals_the_full_pass(mixer: str, pos: str) -> None:
    model = _init_model(mixer, pos)
    idx, ctx = _ids(3, 10, seed=2), _contexts()
    with torch.no_grad():
        full, _ = model(idx, context=ctx)
        plain, _ = model(idx)
        state, steps = None, []
        for t in range(10):
            logits, state = model(idx[:, t : t + 1], state=state, context=ctx if t == 0 else None)
            steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(full[:2], plain[:2], atol=1e-4)  # the context is read
    assert all(c is None for c in state.cross)  # nothing of the context is kept but the recurrent state


@pytest.mark.parametrize("mixer,pos", FAMILIES)
def test_an_empty_context_is_exactly_no_context(mixer: str, pos: str) -> None:
    """Lane 2 has no context: it starts from the zero state, bit for bit as the model fed no context."""
    model = _init_model(mixer, pos)
    idx = _ids(3, 9, seed=3)
    with torch.no_grad():
        with_ctx, s1 = model(idx, context=_contexts())
        without, s2 = model(idx)
        empty, _ = model(idx, context=ContextBatch.from_lists([[], [], []]))
    assert torch.equal(with_ctx[2], without[2])
    assert torch.equal(empty, without)
    recurrent = [i for i, layer in enumerate(s2.layers) if isinstance(layer, torch.Tensor)]
    assert recurrent and all(torch.equal(s1.layers[i][2], s2.layers[i][2]) for i in recurrent)


def test_a_context_is_read_only_where_an_email_starts() -> None:
    """A call that continues a state (no reset) ignores a context given again: the email began earlier."""
    model = _init_model("gru", "none")
    idx, ctx = _ids(3, 8, seed=4), _contexts()
    with torch.no_grad():
        _, state = model(idx[:, :3], context=ctx)
        again, _ = model(idx[:, 3:], state=state.clone(), context=ctx)
        once, _ = model(idx[:, 3:], state=state.clone())
    assert torch.equal(again, once)


@pytest.mark.parametrize("mixer,pos", [("gru", "none"), ("mingru", "learned")])
def test_each_email_of_a_chunk_starts_from_its_own_context(mixer: str, pos: str) -> None:
    """A stream chunk: the end of one email (carried state, no reset), an email with a context, an email
    without one; equal to the pieces fed apart (the carried state, then each email from scratch)."""
    model = _init_model(mixer, pos)
    head, first, second = _ids(1, 3, seed=4), _ids(1, 5, seed=5), _ids(1, 6, seed=6)
    ca = _ids(4, seed=7).tolist()
    with torch.no_grad():
        _, carried = model(_ids(1, 4, seed=8))
        idx = torch.cat([head, first, second], dim=1)  # (1, 14)
        reset = torch.zeros(1, 14, dtype=torch.bool)
        reset[0, 3] = reset[0, 8] = True
        ids, keep = torch.zeros(1, 3, 4, dtype=torch.long), torch.zeros(1, 3, 4, dtype=torch.bool)
        ids[0, 1], keep[0, 1] = torch.tensor(ca), True  # slot 0: the carried email's (not read), 2: none
        ids[0, 0], keep[0, 0] = torch.tensor(_ids(4, seed=9).tolist()), True
        segment = torch.tensor([[0] * 3 + [1] * 5 + [2] * 6])
        chunk, _ = model(idx, state=carried.clone(), context=ContextBatch(ids, keep, segment), reset=reset)
        # positions restart at an email start; a continued state keeps its own count
        part_head, _ = model(head, state=carried.clone())
        part_a, _ = model(first, context=ContextBatch.from_lists([ca]))
        part_b, _ = model(second)
    torch.testing.assert_close(chunk, torch.cat([part_head, part_a, part_b], dim=1), atol=1e-5, rtol=1e-5)


def _loss_and_grads(model: torch.nn.Module, idx: torch.Tensor, ctx: ContextBatch) -> tuple[torch.Tensor, list]:
    model.zero_grad()
    logits, _ = model(idx, context=ctx)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), _ids(idx.numel(), seed=9))
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_fused_and_explicit_paths_agree_with_an_initial_state() -> None:
    """GRU: PyTorch's fused kernel and the gate-by-gate loop; minGRU: the scan and the sequential loop.
    Values and gradients, which reach the projections, the pooling query and the context encoder."""
    idx, ctx = _ids(3, 12, seed=5), _contexts()
    for mixer, pos, switch in (("gru", "none", "explicit"), ("mingru", "learned", "sequential")):
        model = _init_model(mixer, pos).train()
        fast, fast_grads = _loss_and_grads(model, idx, ctx)
        for block in model.blocks:
            if switch == "explicit":
                block.mixer.force_explicit = True
            else:
                block.mixer.mode = "sequential"
        slow, slow_grads = _loss_and_grads(model, idx, ctx)
        torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
        for a, b in zip(fast_grads, slow_grads):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
        names = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
        assert {"ctx_init.query", "ctx_init.proj.0.weight"} <= names
        assert any(n.startswith("ctx_encoder.layers") for n in names)


def test_init_state_needs_a_recurrent_mixer_and_a_context(tiny_data_dir: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(ValueError, match="context=init_state"):
        ModelConfig(mixer="attention", context="init_state")
    with pytest.raises(ValueError, match="model.context must be none, cross, "):
        ModelConfig(mixer="gru", pos="none", context="both")  # type: ignore[arg-type]
    code = main(["train", str(tiny_data_dir), "--out", str(tmp_path / "run"), "--preset", "tiny",
                 "model.context=init_state"])
    assert code == 2 and "model.mixer=attention has none" in capsys.readouterr().err


def test_resume_with_initial_states_is_exact(tiny_data_dir: Path, tmp_path: Path) -> None:
    """A GRU starting emails from its contexts' states, trained on streams, resumes bit for bit."""
    from safetensors.torch import load_file

    over = ["model.mixer=gru", "model.pos=none", "model.context=init_state",
            "model.ctx_block_size=32", "train.ckpt_every=3", "train.eval_every=3", "train.threads=1"]
    ref, run = tmp_path / "ref", tmp_path / "run"
    summary = train(tiny_data_dir, ref, apply_overrides(get_preset("tiny"), [*over, "train.max_steps=6"]),
                    progress=False)
    assert summary["steps"] == 6 and not summary["failed"]
    train(tiny_data_dir, run, apply_overrides(get_preset("tiny"), [*over, "train.max_steps=3"]), progress=False)
    train(tiny_data_dir, run, None, resume=True, overrides=["train.max_steps=6"], progress=False)
    a, b = load_file(str(ref / "model.safetensors")), load_file(str(run / "model.safetensors"))
    assert any(k.startswith("ctx_init.") for k in a)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_reply_is_completed_from_the_originals_state_and_has_no_cross_weights() -> None:
    """`complete --reply-to` and the server pass the original when decoding starts: with init_state the
    decoder's first call starts the email from it; `attention --reply-to` has nothing to show (UserError)."""
    from seqlab.data.tokenizer import ByteTokenizer
    from seqlab.errors import UserError
    from seqlab.generation.reply import reply_context
    from seqlab.inspection.cross import cross_attention_maps

    tok = ByteTokenizer()
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=tok.vocab_size, mixer="gru", pos="none", n_layer=2, n_embd=16,
                                    n_head=2, context="init_state")).eval()
    original = "Shall we meet in room 5 on Tuesday?"
    ctx = reply_context(model, tok, original)
    prompt = torch.tensor([[tok.bos_id, *tok.encode("Yes, room")]])
    decoder_against_full(model, prompt, ctx)
    with pytest.raises(UserError, match="init_state"):
        cross_attention_maps(model, tok, "Yes", original)
