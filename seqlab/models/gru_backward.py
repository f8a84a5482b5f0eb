"""The GRU recurrence for training, with a hand-written backward pass through time.

PyTorch's `aten::gru` on the CPU, when a gradient is needed, runs as a chain of small autograd operators
per time step: about 20 in the forward pass and as many backward nodes, each with its dispatch cost, plus
a bf16 cast of the state at every step under autocast, and a separate (3H, B) @ (B, H) weight-gradient
matmul per step. At the widths a CPU trains (192, 32 lanes) those overheads, not the arithmetic, are most
of the step (a profile of the step; the experiments index).

Here the input projection of every step is one matmul outside (autograd's, under autocast), and
`GRURecurrence` runs the time loop itself in float32: forward, keeping r, z, n, W_hn h + b_hn and the
state each step read; backward, walking the steps in reverse with the gate derivatives written out, and
then the recurrent weights' gradient as ONE matmul over all steps, dW_hh = sum_t dgh_t^T h_{t-1}.

The cell is PyTorch's GRU (Cho et al. 2014 in the form of `torch.nn.GRU`; lecture notes, the GRU slide):

    gh = W_hh h + b_hh                      (split into r, z, n thirds)
    r  = sigmoid(gi_r + gh_r)               gi = W_ih x + b_ih, precomputed for every step
    z  = sigmoid(gi_z + gh_z)
    n  = tanh(gi_n + r * gh_n)
    h' = (1 - z) * n + z * h

and a lane's state is multiplied by `keep[b, t]` (0 where an email starts, else 1) before step t reads it,
which is how the LM resets a stream lane at an email boundary without cutting the sequence.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


class GRURecurrence(torch.autograd.Function):
    """(gi (B, T, 3H), h0 (B, H), keep (B, T) or None, w_hh (3H, H), b_hh (3H,) or None) -> y (B, T, H).

    y[:, t] is the state after step t (so y[:, -1] is the final state). Computed, and returned, in float32
    for bf16 or float16 inputs (the gradient of gi goes back in gi's dtype), in float64 for float64 ones.

    The loops run time-major ((T, B, ...) buffers, so step t's slices are contiguous) and write into
    preallocated buffers: about 7 operators a step forward and 5 backward, where autograd's GRU runs ~40.
    The backward loop carries only dh, the gradient reaching the state: every gate derivative is linear in
    it with coefficients known once the forward pass is done, so they are computed for all steps at once
    before the loop (`coefficients`)."""

    @staticmethod
    def forward(ctx: Any, gi: Tensor, h0: Tensor, keep: Tensor | None, w_hh: Tensor,  # type: ignore[override]
                b_hh: Tensor | None) -> Tensor:
        with torch.autocast(gi.device.type, enabled=False):  # the loop is float32 (module docstring)
            return GRURecurrence._forward(ctx, gi, h0, keep, w_hh, b_hh)

    @staticmethod
    def _forward(ctx: Any, gi: Tensor, h0: Tensor, keep: Tensor | None, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
        B, T, H3 = gi.shape
        H = H3 // 3
        work = torch.promote_types(gi.dtype, torch.float32)  # bf16 up to float32, float64 kept
        g = gi.to(work).transpose(0, 1)  # (T, B, 3H), a view
        g_rz, g_n = g[..., :2 * H].contiguous(), g[..., 2 * H:].contiguous()  # (T, B, 2H), (T, B, H)
        w = w_hh.to(work)
        wt = w.t()  # (H, 3H)
        bias = b_hh.to(work) if b_hh is not None else None
        keep_t = keep.to(work).t().unsqueeze(-1).contiguous() if keep is not None else None  # (T, B, 1)
        # every buffer is contiguous per step: elementwise operators on strided (B, H) slices are far slower
        hp = g.new_empty(T, B, H)  # the state each step read (after the reset)
        gh = g.new_empty(T, B, 3 * H)  # W_hh h + b_hh
        rz = g.new_empty(T, B, 2 * H)  # r and z
        n = g.new_empty(T, B, H)
        y = g.new_empty(T, B, H)
        h = h0.to(work)
        for t in range(T):
            if keep_t is None:
                hp[t].copy_(h)
            else:
                torch.mul(h, keep_t[t], out=hp[t])
            if bias is None:
                torch.mm(hp[t], wt, out=gh[t])
            else:
                torch.addmm(bias, hp[t], wt, out=gh[t])
            torch.add(g_rz[t], gh[t, :, :2 * H], out=rz[t]).sigmoid_()
            torch.addcmul(g_n[t], rz[t, :, :H], gh[t, :, 2 * H:], out=n[t]).tanh_()
            h = torch.lerp(n[t], hp[t], rz[t, :, H:], out=y[t])  # (1 - z) n + z h
        ctx.save_for_backward(hp, gh, rz, n, w, keep_t)
        ctx.has_bias, ctx.gi_dtype, ctx.h0_dtype = bias is not None, gi.dtype, h0.dtype
        return y.transpose(0, 1)  # (B, T, H); float32 under autocast, so a carried state stays exact

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        with torch.autocast(dy.device.type, enabled=False):
            return GRURecurrence._backward(ctx, dy)

    @staticmethod
    def _backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:
        hp, gh, rz, n, w, keep_t = ctx.saved_tensors
        T, B, H = hp.shape
        r, z = rz[..., :H], rz[..., H:].contiguous()
        k_gh, k_gi = coefficients(hp, gh[..., 2 * H:], r, z, n)  # (T, B, 3, H) each
        dy_t = dy.to(w.dtype).transpose(0, 1)  # (T, B, H), a view
        dh_all = dy_t.new_empty(T, B, H)  # dh at each step: the gradient reaching the state it wrote
        dgh = dy_t.new_empty(T, B, 3 * H)  # gradient of W_hh h + b_hh at each step
        dh = dy_t.new_zeros(B, H)
        for t in range(T - 1, -1, -1):
            dh = torch.add(dh, dy_t[t], out=dh_all[t])
            torch.mul(dh.unsqueeze(1), k_gh[t], out=dgh[t].view(B, 3, H))
            dh = torch.addmm(dh * z[t], dgh[t], w)  # (B, H): through h' = ... + z h and through W_hh h
            if keep_t is not None:
                dh.mul_(keep_t[t])
        dgi = (dh_all.unsqueeze(2) * k_gi).view(T, B, 3 * H).transpose(0, 1)  # (B, T, 3H)
        flat = dgh.view(T * B, 3 * H)
        low = ctx.gi_dtype if ctx.gi_dtype in (torch.bfloat16, torch.float16) else w.dtype
        # (3H, H): every step's weight gradient in one matmul; under autocast with bf16 inputs and float32
        # accumulation, as autocast computes every linear layer's weight gradient
        dw = (flat.t().to(low) @ hp.view(T * B, H).to(low)).to(w.dtype)
        db = flat.sum(0) if ctx.has_bias else None
        return dgi.to(ctx.gi_dtype), dh.to(ctx.h0_dtype), None, dw, db


def coefficients(hp: Tensor, ghn: Tensor, r: Tensor, z: Tensor, n: Tensor) -> tuple[Tensor, Tensor]:
    """For every step, what multiplies dh (the gradient reaching h') to give the gradient of each
    pre-activation, from the recurrent side (W_hh h + b_hh) and from the input side (gi): (T, B, 3, H) each,
    gate order r, z, n. From h' = (1 - z) n + z h, n = tanh(a_n), a_n = gi_n + r gh_n, r = sigmoid(a_r),
    z = sigmoid(a_z):
        d a_n = dh (1 - z)(1 - n^2)          =: dh A
        d a_z = dh (h - n) z (1 - z)
        d a_r = d a_n gh_n r (1 - r)         = dh A gh_n r (1 - r)
        d gh_n = d a_n r,   d gi_n = d a_n,  and d gh = d gi for r and z."""
    a = (1 - z) * (1 - n * n)
    k_r = a * ghn * r * (1 - r)
    k_z = (hp - n) * z * (1 - z)
    return torch.stack((k_r, k_z, a * r), dim=2), torch.stack((k_r, k_z, a), dim=2)


def gru_sequence(gi: Tensor, h0: Tensor, w_hh: Tensor, b_hh: Tensor | None,
                 keep: Tensor | None = None) -> Tensor:
    """The GRU states of every step (module docstring): gi (B, T, 3H) = W_ih x + b_ih, h0 (B, H),
    keep (B, T) float (0 resets a lane's state before that step) -> y (B, T, H)."""
    return GRURecurrence.apply(gi, h0, keep, w_hh, b_hh)
