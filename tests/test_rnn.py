"""RNN and GRU: our gate-by-gate loop vs torch.nn.RNN/GRU with copied weights, explicit vs fused path, gradcheck,
BPTT and the recorded GRU gates. Incremental vs full and resets, shared by every mixer: test_model_contract.py."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.func import functional_call

from seqlab.config import ModelConfig
from seqlab.models.rnn import GRUCell, RecurrentMixer, RNNCell, run_cell, run_fused, segment_starts

TORCH_OF = {"rnn": nn.RNN, "gru": nn.GRU}
CELL_OF = {"rnn": RNNCell, "gru": GRUCell}


def _cfg(mixer: str, n_embd: int = 8, fused: bool = True) -> ModelConfig:
    return ModelConfig(mixer=mixer, n_embd=n_embd, n_head=1, pos="none", n_layer=1, fused_rnn=fused)


def _resets(B: int, T: int, seed: int, p: float = 0.2) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    r = torch.rand(B, T, generator=g) < p
    r[0, T // 2] = True  # at least one reset inside the sequence
    return r


def _grads(out: torch.Tensor, h: torch.Tensor, wrt: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    # A loss that weights every position and the final state differently.
    g = torch.Generator().manual_seed(99)
    w_out = torch.randn(out.shape, generator=g, dtype=out.dtype)
    w_h = torch.randn(h.shape, generator=g, dtype=h.dtype)
    return torch.autograd.grad((out * w_out).sum() + (h * w_h).sum(), wrt)


@pytest.mark.parametrize("kind", ["rnn", "gru"])
def test_cell_loop_matches_torch_with_copied_weights(kind: str) -> None:
    torch.manual_seed(0)
    ref = TORCH_OF[kind](5, 7, batch_first=True)
    cell = CELL_OF[kind](5, 7)
    cell.load_state_dict(ref.state_dict())  # same names and shapes: the copy is a plain state-dict load
    x = torch.randn(3, 9, 5, requires_grad=True)
    h0 = torch.randn(3, 7, requires_grad=True)
    out, h = run_cell(cell, x, h0)
    ref_out, ref_h = ref(x, h0.unsqueeze(0))
    torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(h, ref_h.squeeze(0), atol=1e-6, rtol=1e-5)
    ours = _grads(out, h, [x, h0, *cell.parameters()])
    theirs = _grads(ref_out, ref_h.squeeze(0), [x, h0, *ref.parameters()])
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", ["rnn", "gru"])
def test_mixer_holds_exactly_torch_parameters(kind: str) -> None:
    mixer = RecurrentMixer(_cfg(kind), kind)
    ref = TORCH_OF[kind](8, 8, batch_first=True)
    assert {k.removeprefix("cell."): v.shape for k, v in mixer.state_dict().items()} == {
        k: v.shape for k, v in ref.state_dict().items()
    }
    assert sum(p.numel() for p in mixer.parameters()) == sum(p.numel() for p in ref.parameters())


@pytest.mark.parametrize("kind", ["rnn", "gru"])
@pytest.mark.parametrize("with_reset", [False, True])
@pytest.mark.parametrize("with_state", [False, True])
def test_explicit_path_equals_fused_path(kind: str, with_reset: bool, with_state: bool) -> None:
    torch.manual_seed(1)
    mixer = RecurrentMixer(_cfg(kind), kind)
    x = torch.randn(4, 12, 8, requires_grad=True)
    state = torch.randn(4, 8, requires_grad=True) if with_state else None
    reset = _resets(4, 12, seed=3) if with_reset else None
    wrt = [x, *mixer.parameters()] + ([state] if state is not None else [])
    assert mixer.uses_fused()
    y_f, h_f = mixer(x, state, reset)
    g_f = _grads(y_f, h_f, wrt)
    with mixer.explicit():
        assert not mixer.uses_fused()
        y_e, h_e = mixer(x, state, reset)
    assert mixer.uses_fused()  # the context manager restores the fused path
    g_e = _grads(y_e, h_e, wrt)
    torch.testing.assert_close(y_e, y_f, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(h_e, h_f, atol=1e-6, rtol=1e-5)
    for a, b in zip(g_e, g_f, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_segment_starts_cut_where_any_lane_resets() -> None:
    reset = torch.tensor([[True, False, False, True, False], [False, False, True, False, False]])
    assert segment_starts(reset) == [2, 3]  # position 0 needs no cut: the initial state is zeroed there
    assert segment_starts(None) == []


@pytest.mark.parametrize("kind", ["rnn", "gru"])
def test_gradcheck_cells_float64(kind: str) -> None:
    torch.manual_seed(4)
    cell = CELL_OF[kind](3, 4).double()
    x = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    reset = torch.tensor([[False, False, True, False], [False, False, False, False]])
    assert torch.autograd.gradcheck(lambda a, b: run_cell(cell, a, b, reset), (x, h0))
    # The one-step transition w.r.t. every parameter, through torch.func.functional_call.
    names = [n for n, _ in cell.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in cell.parameters())

    def one_step(*args: torch.Tensor) -> torch.Tensor:
        return functional_call(cell, dict(zip(names, args[:-2])), (args[-2], args[-1]))

    assert torch.autograd.gradcheck(one_step, (*params, x[:, 0].detach().requires_grad_(), h0))


@pytest.mark.parametrize("kind", ["rnn", "gru"])
def test_bptt_accumulates_gradient_of_every_use(kind: str) -> None:
    # Lecture: "Reuse one transition across positions; BPTT accumulates gradients through every use."
    # Unroll T steps giving each step its own copy of weight_hh; the gradient w.r.t. the shared weight
    # must equal the sum of the per-copy gradients.
    torch.manual_seed(5)
    T = 6
    cell = CELL_OF[kind](3, 4).double()
    x = torch.randn(2, T, 3, dtype=torch.float64)
    target = torch.randn(2, 4, dtype=torch.float64)
    _, h_T = run_cell(cell, x)
    (g_shared,) = torch.autograd.grad(((h_T - target) ** 2).sum(), [cell.weight_hh_l0])
    copies = [cell.weight_hh_l0.detach().clone().requires_grad_() for _ in range(T)]
    h = torch.zeros(2, 4, dtype=torch.float64)
    for t in range(T):
        h = functional_call(cell, {"weight_hh_l0": copies[t]}, (x[:, t], h))
    per_use = torch.autograd.grad(((h - target) ** 2).sum(), copies)
    torch.testing.assert_close(sum(per_use), g_shared)
    # Every use contributes, not only the last one (the first step sees h_0 = 0, so its term is 0).
    for g in per_use[1:]:
        assert g.abs().sum() > 1e-8
    assert not torch.allclose(per_use[-1], g_shared)


def test_gru_gates_are_recorded_from_the_explicit_path() -> None:
    torch.manual_seed(6)
    mixer = RecurrentMixer(_cfg("gru"), "gru")
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        y_fused, _ = mixer(x)
        mixer.record_gates = True
        assert not mixer.uses_fused()
        y_rec, _ = mixer(x)
    assert mixer.last_gates is not None
    r, z = mixer.last_gates["r"], mixer.last_gates["z"]
    assert r.shape == z.shape == (2, 5, 8)
    torch.testing.assert_close(y_rec, y_fused, atol=1e-6, rtol=1e-5)
    # At t = 0 the state is zero, so z_0 = sigmoid(W_iz x_0 + b_iz + b_hz) with PyTorch's row order r, z, n.
    c = mixer.cell
    rows = slice(8, 16)
    z0 = torch.sigmoid(x[:, 0] @ c.weight_ih_l0[rows].T + c.bias_ih_l0[rows] + c.bias_hh_l0[rows])
    torch.testing.assert_close(z[:, 0], z0)
    r0 = torch.sigmoid(x[:, 0] @ c.weight_ih_l0[:8].T + c.bias_ih_l0[:8] + c.bias_hh_l0[:8])
    torch.testing.assert_close(r[:, 0], r0)


def test_unknown_cell_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="lstm"):
        RecurrentMixer(_cfg("rnn"), "lstm")


def test_run_fused_without_resets_is_torch_gru() -> None:
    torch.manual_seed(7)
    cell = GRUCell(4, 4)
    x = torch.randn(2, 5, 4)
    with torch.no_grad():
        out, h = run_fused(cell, x)
        ref_out, ref_h = nn.GRU.forward(cell, x)  # nn.GRU's own forward on the cell's parameters
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(h, ref_h.squeeze(0))
