"""minGRU: log-space scan vs sequential mode, worked numbers, resets and initial state inside the scan,
gradients. Incremental vs full through the mixer, shared by every mixer: test_model_contract.py."""

from __future__ import annotations

import math

import pytest
import torch

from seqlab.models.mingru import MinGRU, g, log_g, mingru_scan, mingru_scan_log, mingru_sequential


def _inputs(B: int, T: int, H: int, seed: int, dtype: torch.dtype = torch.float64, scale: float = 2.0):
    gen = torch.Generator().manual_seed(seed)
    pre_z = (torch.randn(B, T, H, generator=gen, dtype=dtype) * scale).requires_grad_()
    pre_h = (torch.randn(B, T, H, generator=gen, dtype=dtype) * scale).requires_grad_()
    h0 = torch.rand(B, H, generator=gen, dtype=dtype).requires_grad_()
    reset = torch.rand(B, T, generator=gen) < 0.2
    reset[0, T // 2] = True
    return pre_z, pre_h, h0, reset


def test_g_is_the_papers_positive_activation() -> None:
    v = torch.tensor([-30.0, -1.0, 0.0, 1.0, 2.5])
    expected = torch.tensor([1 / (1 + math.exp(30.0)), 1 / (1 + math.e), 0.5, 1.5, 3.0])
    torch.testing.assert_close(g(v), expected)
    torch.testing.assert_close(log_g(v), torch.log(expected))
    assert (g(torch.linspace(-50, 50, 101)) > 0).all()


def test_worked_example_by_hand() -> None:
    # pre_z = 0 -> z = 1/2; pre_h = 1 -> h~ = 1.5. From h0 = 0: h1 = 0.75, h2 = 0.375 + 0.75 = 1.125;
    # a reset at t = 2 forgets h2: h3 = 0.75 again.
    pre_z = torch.zeros(1, 4, 1)
    pre_h = torch.ones(1, 4, 1)
    reset = torch.tensor([[False, False, True, False]])
    expected = torch.tensor([0.75, 1.125, 0.75, 1.125]).view(1, 4, 1)
    for fn in (mingru_scan, mingru_sequential):
        h, h_last = fn(pre_z, pre_h, None, reset)
        torch.testing.assert_close(h, expected)
        torch.testing.assert_close(h_last, expected[:, -1])


@pytest.mark.parametrize("with_h0", [False, True])
@pytest.mark.parametrize("with_reset", [False, True])
def test_scan_equals_sequential_values_and_gradients(with_h0: bool, with_reset: bool) -> None:
    pre_z, pre_h, h0, reset = _inputs(3, 17, 5, seed=0)
    h0_arg = h0 if with_h0 else None
    reset_arg = reset if with_reset else None
    wrt = [pre_z, pre_h] + ([h0] if with_h0 else [])
    w = torch.randn(3, 17, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    results = []
    for fn in (mingru_scan, mingru_sequential):
        h, h_last = fn(pre_z, pre_h, h0_arg, reset_arg)
        results.append((h, h_last, torch.autograd.grad((h * w).sum() + h_last.sum(), wrt)))
    (h_s, l_s, g_s), (h_q, l_q, g_q) = results
    torch.testing.assert_close(h_s, h_q, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(l_s, l_q, atol=1e-12, rtol=1e-10)
    for a, b in zip(g_s, g_q, strict=True):
        torch.testing.assert_close(a, b, atol=1e-11, rtol=1e-9)


def test_scan_float32_long_sequence_matches_float64_sequential() -> None:
    # The linear scan never rounds through log/exp: at L=4000 in float32 it stays within 1e-5 relative of
    # float64, while Heinsen's log-space scan, which sums logs over the whole piece, needs 1e-3.
    pre_z, pre_h, h0, _ = _inputs(2, 4000, 8, seed=2, dtype=torch.float32, scale=1.0)
    h64, _ = mingru_sequential(pre_z.double(), pre_h.double(), h0.double())
    h32, _ = mingru_scan(pre_z, pre_h, h0)
    assert h32.dtype == torch.float32
    torch.testing.assert_close(h32.double(), h64, rtol=1e-5, atol=1e-7)
    log32, _ = mingru_scan_log(pre_z, pre_h, h0)
    torch.testing.assert_close(log32.double(), h64, rtol=1e-3, atol=1e-5)
    assert (h32.double() - h64).abs().max() < (log32.double() - h64).abs().max()


@pytest.mark.parametrize("T", [1, 15, 16, 17, 100])
def test_linear_scan_equals_log_space_reference(T: int) -> None:
    """Values and gradients, with and without h0 and resets, at lengths around the chunk size."""
    pre_z, pre_h, h0, reset = _inputs(3, T, 5, seed=T)
    for state, cut in ((None, None), (h0, reset)):
        lin = mingru_scan(pre_z, pre_h, state, cut)
        ref = mingru_scan_log(pre_z, pre_h, state, cut)
        for a, b in zip(lin, ref, strict=True):
            torch.testing.assert_close(a, b, atol=1e-11, rtol=1e-9)
        inputs = [pre_z, pre_h] + ([h0] if state is not None else [])
        g_lin = torch.autograd.grad(lin[0].sum() + lin[1].square().sum(), inputs)
        g_ref = torch.autograd.grad(ref[0].sum() + ref[1].square().sum(), inputs)
        for a, b in zip(g_lin, g_ref, strict=True):
            torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)


def test_gradcheck_scan_float64() -> None:
    pre_z, pre_h, h0, reset = _inputs(2, 6, 3, seed=3)
    assert torch.autograd.gradcheck(lambda a, b, c: mingru_scan(a, b, c, reset), (pre_z, pre_h, h0))
    assert torch.autograd.gradcheck(lambda a, b: mingru_scan(a, b, None, None), (pre_z, pre_h))


def test_no_nan_or_inf_in_gradients_at_extremes() -> None:
    pre_z, pre_h, _, reset = _inputs(2, 64, 4, seed=4, dtype=torch.float32, scale=40.0)
    reset[:, 0] = True
    h0 = torch.zeros(2, 4, requires_grad=True)  # a zero state has no logarithm: it must still work
    for scan in (mingru_scan, mingru_scan_log):
        h, h_last = scan(pre_z, pre_h, h0, reset)
        grads = torch.autograd.grad(h.sum() + h_last.sum(), [pre_z, pre_h, h0])
        assert torch.isfinite(h).all()
        for grad in grads:
            assert torch.isfinite(grad).all()
    torch.testing.assert_close(mingru_scan(pre_z, pre_h, h0, reset)[0], mingru_scan_log(pre_z, pre_h, h0, reset)[0],
                               rtol=1e-4, atol=1e-5)


def test_layer_modes_agree_and_bad_mode_is_value_error() -> None:
    torch.manual_seed(8)
    layer = MinGRU(4, 6)
    x = torch.randn(2, 9, 4)
    h_scan, last_scan = layer(x, mode="scan")
    h_seq, last_seq = layer(x, mode="sequential")
    assert h_scan.shape == (2, 9, 6)
    torch.testing.assert_close(h_scan, h_seq, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(last_scan, last_seq, atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="mode"):
        layer(x, mode="parallel")


@pytest.mark.parametrize("T", [1, 2, 7, 24, 97, 1000])
@pytest.mark.parametrize("reverse", [False, True])
def test_affine_scan_equals_a_loop_both_ways(T: int, reverse: bool) -> None:
    """The chunked three-pass scan (whole chunks and the positions left over) against a plain loop:
    h_t = a_t h_{t-1} + b_t forwards, h_t = a_t h_{t+1} + b_t backwards (the adjoint's direction)."""
    from seqlab.models.mingru import _affine_scan

    gen = torch.Generator().manual_seed(T)
    a = torch.rand(2, T, 3, generator=gen, dtype=torch.float64)
    b = torch.randn(2, T, 3, generator=gen, dtype=torch.float64)
    h0 = torch.randn(2, 3, generator=gen, dtype=torch.float64)
    want, h = torch.empty_like(b), h0
    for t in range(T - 1, -1, -1) if reverse else range(T):
        h = want[:, t] = a[:, t] * h + b[:, t]
    torch.testing.assert_close(_affine_scan(a, b, h0, reverse=reverse), want, rtol=1e-12, atol=1e-12)
    zero = _affine_scan(a, b, None, reverse=reverse)
    torch.testing.assert_close(zero, _affine_scan(a, b, torch.zeros_like(h0), reverse=reverse), rtol=0, atol=0)


def test_linear_scan_equals_log_space_reference_on_a_long_sequence() -> None:
    """Values and gradients at T = 5000 in float64, with h0 and resets: the chunked scan and its
    hand-written backward (a reverse scan) against autograd through Heinsen's log-space form."""
    pre_z, pre_h, h0, reset = _inputs(2, 5000, 4, seed=5, scale=1.5)
    w = torch.randn(2, 5000, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    grads = []
    for scan in (mingru_scan, mingru_scan_log):
        h, h_last = scan(pre_z, pre_h, h0, reset)
        grads.append((h, h_last, *torch.autograd.grad((h * w).sum() + h_last.sum(), [pre_z, pre_h, h0])))
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-11, rtol=1e-9)


def test_scan_at_extreme_and_boundary_gates_matches_both_references() -> None:
    """Pre-activations at the branch of g (exactly 0, +-1e-9), saturated (+-40) and far out (+-1e3), float64:
    values and gradients against the sequential form everywhere, and against the log-space form where
    no pre_h is exactly 0 (there its relu(v) has derivative 0, so log g has a one-sided slope)."""
    gen = torch.Generator().manual_seed(7)
    special = torch.tensor([-1e3, -40.0, -5.0, -1e-9, 0.0, 1e-9, 5.0, 40.0, 1e3], dtype=torch.float64)
    pick = torch.randint(0, len(special), (2, 2, 300, 6), generator=gen)
    pre_z, pre_h = (special[i].clone().requires_grad_() for i in pick)
    h0 = torch.rand(2, 6, generator=gen, dtype=torch.float64).requires_grad_()
    w = torch.randn(2, 300, 6, dtype=torch.float64, generator=gen)

    def run(scan, pz: torch.Tensor, ph: torch.Tensor) -> list[torch.Tensor]:
        h, h_last = scan(pz, ph, h0)
        return [h, h_last, *torch.autograd.grad((h * w).sum() + h_last.sum(), [pz, ph, h0])]

    for a, b in zip(run(mingru_scan, pre_z, pre_h), run(mingru_sequential, pre_z, pre_h), strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)
    # h reaches ~1e3 here and the log form's cumulative sums reach ~1e5, so it rounds at ~1e-8 absolute
    # (the linear scan stays within ~1e-13 of the sequential form, checked just above).
    nonzero = torch.where(pre_h == 0, 1e-12, pre_h).detach().requires_grad_()
    lin, log = run(mingru_scan, pre_z, nonzero), run(mingru_scan_log, pre_z, nonzero)
    for a, b in zip(lin, log, strict=True):
        torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-8)
    seq = run(mingru_sequential, pre_z, nonzero)
    assert (lin[0] - seq[0]).abs().max() <= (log[0] - seq[0]).abs().max()


def test_scan_float32_gradients_on_a_long_sequence_match_float64_reference() -> None:
    """The float32 backward (reverse scan from the output gradient) stays close to the float64 log-space
    reference at T = 4000: products and sums only, nothing accumulates in log space."""
    pre_z, pre_h, h0, reset = _inputs(2, 4000, 8, seed=8, dtype=torch.float32, scale=1.0)
    w = torch.randn(2, 4000, 8, generator=torch.Generator().manual_seed(9))
    h32, _ = mingru_scan(pre_z, pre_h, h0, reset)
    g32 = torch.autograd.grad((h32 * w).sum(), [pre_z, pre_h, h0])
    leaves = [t.detach().double().requires_grad_() for t in (pre_z, pre_h, h0)]
    h64, _ = mingru_scan_log(*leaves, reset)
    g64 = torch.autograd.grad((h64 * w.double()).sum(), leaves)
    for a, b in zip(g32, g64, strict=True):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-5)
