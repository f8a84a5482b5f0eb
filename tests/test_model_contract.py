"""The one contract every sequence model keeps, tested once for every mixer family and position kind.

Two levels (ARCHITECTURE.md, "The model"):
- a mixer inside a block: `mixer(x (B, T, C), state=None, reset=None) -> (y (B, T, C), state)`;
- the model: `model(idx (B, T), state=None, context=None, reset=None) -> (logits (B, T, V), state)`.
At both, feeding a sequence in pieces with the returned state equals one full pass (values and, for the
mixer, gradients), a reset flag starts a fresh email in a recurrent state, and later tokens never change
earlier logits. Family-specific checks (ours vs PyTorch with copied weights, explicit vs fused, scan vs
sequential, the lecture's numbers) stay in test_rnn.py, test_mingru.py, test_attention.py, test_lm.py.
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import BLOCK, C, V
from tiny_models import tiny_lm as _model
from tiny_models import token_ids as _ids
from torch import Tensor, nn

from seqlab.config import ModelConfig
from seqlab.models import LM, MIXERS, LMState
from seqlab.models.kv_cache import KVCache
from seqlab.models.lm import map_tensors

T = 12  # tokens per model test; the mixer tests run 20 > BLOCK (rope and alibi are not bound by block_size)
RECURRENT = ("rnn", "gru", "mingru")

# ---------------------------------------------------------------- level 1: one mixer

# name -> (mixer, pos, extra config); learned and sinusoidal positions act in the LM, not in a mixer
MIXER_CASES: dict[str, tuple[str, str, dict[str, object]]] = {
    "rnn-fused": ("rnn", "none", {"fused_rnn": True}),
    "rnn-explicit": ("rnn", "none", {"fused_rnn": False}),
    "gru-fused": ("gru", "none", {"fused_rnn": True}),
    "gru-explicit": ("gru", "none", {"fused_rnn": False}),
    "mingru": ("mingru", "none", {}),
    "attention-none": ("attention", "none", {}),
    "attention-rope": ("attention", "rope", {}),
    "attention-alibi": ("attention", "alibi", {}),
}
RECURRENT_CASES = [name for name, (mixer, _, _) in MIXER_CASES.items() if mixer in RECURRENT]


def _mixer(case: str, seed: int = 0) -> nn.Module:
    mixer, pos, extra = MIXER_CASES[case]
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=V, block_size=BLOCK, mixer=mixer, n_layer=1, n_embd=C, n_head=2, pos=pos,
                      **extra)  # type: ignore[arg-type]
    return MIXERS[mixer](cfg)


def _resets(b: int, t: int, seed: int) -> Tensor:
    """(B, T) bool: random email starts, at least one inside the sequence."""
    r = torch.rand(b, t, generator=torch.Generator().manual_seed(seed)) < 0.15
    r[0, t // 2] = True
    return r


def _state_tensors(state: object) -> list[Tensor]:
    """The filled part of a mixer state: the (B, C) hidden state, or the cache's (B, H, length, D) keys and values."""
    if isinstance(state, KVCache):
        return [state.k[:, :, : state.length], state.v[:, :, : state.length]]
    assert isinstance(state, Tensor)
    return [state]


def _fresh(state: object) -> object:
    # attention caches are appended to in place: every use of one earlier state gets its own copy
    return map_tensors(state, lambda t: t.clone())


def _run_pieces(mixer: nn.Module, x: Tensor, state: object, reset: Tensor, chunks: list[int]) -> tuple[Tensor, object]:
    """x (B, T, C) fed in pieces of the given sizes, carrying the state -> (y (B, T, C), last state)."""
    outs, t = [], 0
    for n in chunks:
        y, state = mixer(x[:, t : t + n], state=state, reset=reset[:, t : t + n])
        outs.append(y)
        t += n
    return torch.cat(outs, dim=1), state


@pytest.mark.parametrize("chunks", [[1] * 20, [7, 1, 5, 7]], ids=["token_by_token", "uneven"])
@pytest.mark.parametrize("case", list(MIXER_CASES))
def test_mixer_in_pieces_equals_full_pass_values_and_gradients(case: str, chunks: list[int]) -> None:
    mixer = _mixer(case).train()  # under autograd: the state must carry gradients, not break them
    x = torch.randn(2, sum(chunks), C, requires_grad=True)  # 20 > BLOCK positions
    reset = _resets(2, x.size(1), seed=3)
    with torch.no_grad():
        _, state0 = mixer(torch.randn(2, 3, C))  # continue from a state returned by an earlier call
    y_full, s_full = mixer(x, state=_fresh(state0), reset=reset)
    assert y_full.shape == x.shape
    y_inc, s_inc = _run_pieces(mixer, x, _fresh(state0), reset, chunks)
    torch.testing.assert_close(y_inc, y_full, atol=1e-5, rtol=1e-5)
    for a, b in zip(_state_tensors(s_inc), _state_tensors(s_full), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    w = torch.randn(y_full.shape, generator=torch.Generator().manual_seed(4))  # weights every position apart
    wrt = [x, *mixer.parameters()]
    for a, b in zip(torch.autograd.grad((y_inc * w).sum(), wrt), torch.autograd.grad((y_full * w).sum(), wrt),
                    strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("case", list(MIXER_CASES))
def test_mixer_reset_starts_fresh_only_where_there_is_a_running_state(case: str) -> None:
    mixer = _mixer(case).eval()
    x = torch.randn(2, 11, C)
    reset = torch.zeros(2, 11, dtype=torch.bool)
    reset[:, 6] = True
    with torch.no_grad():
        _, state0 = mixer(torch.randn(2, 4, C))
        y, s = mixer(x, state=_fresh(state0), reset=reset)
        y_plain, _ = mixer(x, state=_fresh(state0))
        y_suffix, s_suffix = mixer(x[:, 6:])
    if MIXER_CASES[case][0] in RECURRENT:
        # from the reset on, the lane computes exactly what a fresh start on the suffix computes
        torch.testing.assert_close(y[:, 6:], y_suffix, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(s, s_suffix, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(y[:, :6], y_plain[:, :6], atol=1e-6, rtol=1e-5)
        assert not torch.allclose(y[:, 6:], y_plain[:, 6:], atol=1e-4)  # the reset did change something
    else:
        # attention keeps no running summary to forget: its windows lie inside one email, reset is ignored
        torch.testing.assert_close(y, y_plain)


@pytest.mark.parametrize("case", RECURRENT_CASES)
def test_recurrent_mixer_rejects_a_state_or_reset_of_the_wrong_shape(case: str) -> None:
    mixer = _mixer(case)
    x = torch.randn(2, 3, C)
    with pytest.raises(ValueError, match="state"):
        mixer(x, torch.rand(3, C))
    with pytest.raises(ValueError, match="state"):
        mixer(x, torch.rand(2, C // 2))
    with pytest.raises(ValueError, match="reset"):
        mixer(x, None, torch.zeros(2, 4, dtype=torch.bool))


# ---------------------------------------------------------------- level 2: the model

COMBOS = [("attention", p) for p in ("none", "learned", "sinusoidal", "rope", "alibi")] + [
    (m, p) for m in RECURRENT for p in ("none", "learned", "sinusoidal")
]
CROSS = [("attention", "rope"), ("attention", "learned"), ("gru", "none"), ("mingru", "sinusoidal")]


def _feed(model: LM, idx: Tensor, chunks: list[int], context: Tensor | None = None,
          reset: Tensor | None = None) -> Tensor:
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
def test_model_is_causal_and_in_pieces_equals_full_pass(mixer: str, pos: str, cross: bool) -> None:
    model = _model(mixer, pos, context="cross" if cross else "none")
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
    # with email starts inside the chunk (positions restart there) the pieces still equal the full pass
    reset = _resets(2, T, seed=8)
    with torch.no_grad():
        full_r, _ = model(idx, context=ctx, reset=reset)
    torch.testing.assert_close(_feed(model, idx, [3, 1, 8], ctx, reset), full_r, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "mixer,pos,fused",
    [(m, p, True) for m, p in COMBOS if m in RECURRENT] + [(m, "learned", False) for m in ("rnn", "gru")],
)
def test_model_reset_flags_start_a_fresh_email(mixer: str, pos: str, fused: bool) -> None:
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


@pytest.mark.parametrize("mixer", ["attention", *RECURRENT])
def test_model_state_index_select_detach_clone(mixer: str) -> None:
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
    tensors: list[Tensor] = []
    map_tensors(cut, lambda t: tensors.append(t) or t)
    assert tensors and not any(t.requires_grad for t in tensors)
