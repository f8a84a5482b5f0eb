"""The GRU recurrence with a hand-written backward (models/gru_backward.py) against PyTorch's GRU and autograd."""

from __future__ import annotations

import pytest
import torch

from seqlab.config import ModelConfig
from seqlab.models.gru_backward import gru_sequence
from seqlab.models.rnn import GRUCell, RecurrentMixer, run_fused


def _cell(h: int, seed: int = 0) -> GRUCell:
    torch.manual_seed(seed)
    return GRUCell(h, h).double()


def test_gradcheck_with_resets_and_a_start_state() -> None:
    """torch.autograd.gradcheck: the hand-written backward against finite differences, every input."""
    torch.manual_seed(1)
    B, T, H = 2, 5, 3
    gi = torch.randn(B, T, 3 * H, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(B, H, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3 * H, H, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3 * H, dtype=torch.float64, requires_grad=True)
    keep = torch.tensor([[1, 1, 0, 1, 1], [1, 0, 1, 1, 0]], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda *a: gru_sequence(a[0], a[1], a[2], a[3], keep), (gi, h0, w, b))
    assert torch.autograd.gradcheck(lambda *a: gru_sequence(a[0], a[1], a[2], None), (gi, h0, w))


@pytest.mark.parametrize("with_resets", [False, True])
def test_equals_the_fused_gru_in_float64(with_resets: bool) -> None:
    """Values and the gradients of x, h0 and every parameter equal PyTorch's fused kernel (cut at resets)."""
    B, T, H = 4, 11, 6
    cell = _cell(H)
    torch.manual_seed(2)
    x = torch.randn(B, T, H, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(B, H, dtype=torch.float64, requires_grad=True)
    reset = (torch.rand(B, T) < 0.3) if with_resets else None
    y_ref, h_ref = run_fused(cell, x, h0, reset)
    keep = None if reset is None else (~reset).double()
    y = gru_sequence(cell.project(x), h0, cell.weight_hh_l0, cell.bias_hh_l0, keep)
    torch.testing.assert_close(y, y_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(y[:, -1], h_ref, rtol=0, atol=1e-12)
    probe = torch.randn_like(y)
    inputs = [x, h0, *cell.parameters()]
    for got, want in zip(torch.autograd.grad((y * probe).sum(), inputs),
                         torch.autograd.grad((y_ref * probe).sum(), inputs)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_under_bf16_autocast_the_loop_stays_float32() -> None:
    """gi arrives in bf16 (autocast's input projection); the states come back in float32, and the
    gradients stay within bf16 rounding of the float32 ones."""
    B, T, H = 8, 16, 32
    torch.manual_seed(3)
    cell = GRUCell(H, H)
    x = torch.randn(B, T, H, requires_grad=True)
    h0 = torch.zeros(B, H)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y16 = gru_sequence(cell.project(x), h0, cell.weight_hh_l0, cell.bias_hh_l0)
    assert y16.dtype == torch.float32
    (g16,) = torch.autograd.grad(y16.sum(), [cell.weight_hh_l0])
    y32 = gru_sequence(cell.project(x), h0, cell.weight_hh_l0, cell.bias_hh_l0)
    (g32,) = torch.autograd.grad(y32.sum(), [cell.weight_hh_l0])
    assert g16.dtype == torch.float32
    assert (y16 - y32).abs().max() < 0.05
    assert (g16 - g32).norm() / g32.norm() < 0.05


def test_the_mixer_trains_through_it_and_still_equals_the_kernel() -> None:
    """RecurrentMixer uses the recurrence when a gradient is needed, PyTorch's kernel when not; both give
    the same states, and the gradients equal the kernel's."""
    cfg = ModelConfig(vocab_size=16, n_embd=8, n_head=2, n_layer=1, block_size=8, mixer="gru", pos="none")
    torch.manual_seed(4)
    mixer = RecurrentMixer(cfg, "gru").double()
    x = torch.randn(3, 10, 8, dtype=torch.float64, requires_grad=True)
    reset = torch.zeros(3, 10, dtype=torch.bool)
    reset[1, 4] = reset[2, 7] = True
    y, h = mixer(x, None, reset)
    with torch.no_grad():
        y_kernel, h_kernel = mixer(x, None, reset)
    torch.testing.assert_close(y.detach(), y_kernel, rtol=0, atol=1e-12)
    torch.testing.assert_close(h.detach(), h_kernel, rtol=0, atol=1e-12)
    y_ref, _ = run_fused(mixer.cell, x, None, reset)
    inputs = [x, *mixer.parameters()]
    for got, want in zip(torch.autograd.grad(y.sum(), inputs), torch.autograd.grad(y_ref.sum(), inputs)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
