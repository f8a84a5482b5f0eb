"""minGRU (Feng et al. 2024, "Were RNNs All We Needed?"): a GRU whose gates read only the input.

Holds the ways of computing the same recurrence: `mingru_scan` (all positions at once, a chunked
linear-space parallel scan, the default), `mingru_scan_log` (the log-space scan of Heinsen 2023, kept as
the reference the fast one is tested against) and `mingru_sequential` (one position after the other, for
one-token decoding); the `MinGRU` layer that chooses between them, and `MinGRUMixer`, the
`(x, state, reset) -> (y, state)` mixer the LM shell stacks.

Recurrence (Feng et al. 2024, Sec. 3.1, minGRU):
    z_t  = sigmoid(Linear_z(x_t))              update gate, from the input only
    h~_t = g(Linear_h(x_t))                    candidate, g(v) = v + 0.5 if v >= 0 else sigmoid(v) > 0
    h_t  = (1 - z_t) * h_{t-1} + z_t * h~_t
Because z_t and h~_t do not depend on h, this is the linear recurrence h_t = a_t h_{t-1} + b_t with
a_t = 1 - z_t and b_t = z_t h~_t, both positive, which the scan solves for every t in O(log) depth.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.config import ModelConfig
from seqlab.models.rnn import check_mixer_inputs, segment_starts


def g(v: Tensor) -> Tensor:
    """The paper's positive activation (Feng et al. 2024, Sec. 3.3): v + 0.5 for v >= 0, sigmoid(v) below."""
    return torch.where(v >= 0, v + 0.5, torch.sigmoid(v))


def log_g(v: Tensor) -> Tensor:
    """log g(v) without taking the log of anything that can be 0: log(v + 0.5) and log sigmoid(v) = -softplus(-v).

    Both branches are finite everywhere (relu keeps the first >= log 0.5), so `where` passes no NaN
    gradient from the branch it does not take.
    """
    return torch.where(v >= 0, torch.log(F.relu(v) + 0.5), -F.softplus(-v))


def _scan_dtype(dtype: torch.dtype) -> torch.dtype:
    # The log-space sums need at least float32 (half precision loses the cumulative sums); float64 stays.
    return torch.promote_types(dtype, torch.float32)


def _scan_piece(log_a: Tensor, log_b: Tensor, h0: Tensor | None) -> Tensor:
    """h_t = a_t h_{t-1} + b_t for every t of a piece without resets; log_a, log_b (B, T, H), h0 (B, H) -> (B, T, H).

    Heinsen (2023), "Efficient parallelization of a ubiquitous sequential computation":
        a*_t = sum_{s<=t} log a_s,      log h_t = a*_t + logcumsumexp_{s<=t}(log b_s - a*_s)
    (h_t = sum_s (prod_{u=s+1..t} a_u) b_s, with the products as exp(a*_t - a*_s)). The initial state
    enters linearly as prod_{u<=t} a_u * h0 = exp(a*_t) h0, which needs no log of h0: it may be zero
    (a reset lane) or of any sign.
    """
    a_star = torch.cumsum(log_a, dim=1)  # (B, T, H), <= 0 since every a_s is in (0, 1)
    h = torch.exp(a_star + torch.logcumsumexp(log_b - a_star, dim=1))  # (B, T, H)
    if h0 is not None:
        h = h + torch.exp(a_star) * h0.unsqueeze(1)  # (B, T, H) * (B, 1, H)
    return h


def _chunk_len(T: int) -> int:
    """Positions per chunk of `_affine_scan`: about sqrt(2T / 3), which makes its 3c + 2T/c torch calls fewest."""
    return max(1, round(math.sqrt(2 * T / 3)))


def _affine_scan(a: Tensor, b: Tensor, h0: Tensor | None, reverse: bool = False, out: Tensor | None = None
                 ) -> Tensor:
    """h_t = a_t h_{t-1} + b_t for every t (reverse: h_t = a_t h_{t+1} + b_t, from the end), with the state
    before the first step h0 (B, H) or zero; a, b (B, T, H) -> h (B, T, H), written to `out` (a new tensor
    when None; `out` may be `b` itself: each position is read before it is overwritten). No autograd runs
    through here.

    Three passes over chunks of c = `_chunk_len(T)` positions (a chunked scan, Blelloch 1990, sec. 1.4),
    each a short loop of whole-tensor torch calls on (B, T/c, H) slices, so the number of calls is about
    3c + 2T/c instead of the T of a loop over positions:
      1. each chunk's map from the state entering it to the state leaving it, h_out = P h_in + S,
         P = prod_j a_j and S = the chunk scanned from a zero state (c steps on every chunk at once);
      2. the state entering each chunk, carried across the T/c chunks (h_in_{k+1} = P_k h_in_k + S_k);
      3. every position from its chunk's entering state (c steps on every chunk at once).
    Positions past the last whole chunk (fewer than c) run one at a time after it. Only products and sums
    of the values: no log or exp rounds them (relative error ~4e-7 in float32 at T = 8192, against ~1e-3
    for the log-space form) and gates in (0, 1) only shrink, so nothing overflows or divides.
    """
    B, T, H = a.shape
    c = _chunk_len(T)
    n = T // c
    if out is None:
        out = torch.empty(B, T, H, dtype=b.dtype, device=b.device)
    h = a.new_zeros(B, H) if h0 is None else h0
    lo = T - n * c if reverse else 0  # whole chunks cover [lo, lo + n c): the positions the scan reaches first
    if n:
        av, bv, ov = (t[:, lo:lo + n * c].view(B, n, c, H) for t in (a, b, out))  # chunk k, position j in it
        js = range(c - 1, -1, -1) if reverse else range(c)
        S, P = bv[:, :, js[0]].clone(), av[:, :, js[0]].clone()  # (B, n, H) each
        for j in js[1:]:
            torch.addcmul(bv[:, :, j], av[:, :, j], S, out=S)  # S <- a_j S + b_j
            P.mul_(av[:, :, j])
        h_in = torch.empty_like(S)  # (B, n, H)
        for k in range(n - 1, -1, -1) if reverse else range(n):
            h_in[:, k] = h
            h = torch.addcmul(S[:, k], P[:, k], h)  # the state leaving chunk k
        prev = h_in
        for j in js:
            prev = torch.addcmul(bv[:, :, j], av[:, :, j], prev, out=ov[:, :, j])
    for t in range(lo - 1, -1, -1) if reverse else range(n * c, T):
        h = torch.addcmul(b[:, t], a[:, t], h, out=out[:, t])
    return out


def _scan_piece_linear(pre_z: Tensor, pre_h: Tensor, h0: Tensor | None) -> Tensor:
    """`_LinearScan` on a piece without resets; h0 None is a zero state."""
    return _LinearScan.apply(pre_z, pre_h, pre_z.new_zeros(pre_z.shape[0], pre_z.shape[2]) if h0 is None else h0)


class _LinearScan(torch.autograd.Function):
    """The minGRU recurrence in linear space from the pre-activations: (pre_z, pre_h (B, T, H), h0 (B, H))
    -> h (B, T, H), with a = 1 - z = sigmoid(-pre_z), b = z g(pre_h) and h_t = a_t h_{t-1} + b_t.

    One function from the pre-activations to h, with a hand-written backward, instead of autograd through
    the gates and the scan, which would run a separate kernel (and keep a tensor) for each derivative of
    sigmoid, where, the products and every scan step. Kept for the backward: a (with a zero after the
    end, so a_{t+1} is a view), z, g(pre_h), pre_h (for g's branch) and h. For g_t = dL/dh_t, the adjoint
    lambda_t = dL/dh_t through all later steps obeys the same recurrence backwards in time,
        lambda_t = a_{t+1} lambda_{t+1} + g_t        (lambda after the end: 0)
    and then, with dz/dpre_z = z a and da/dpre_z = -z a (z = sigmoid(pre_z), a = 1 - z),
        dL/dpre_z = lambda z a (g(pre_h) - h_{t-1}),   dL/dpre_h = lambda z g'(pre_h),   dL/dh0 = a_1 lambda_1
    where g'(v) = 1 for v >= 0 and sigmoid'(v) = g (1 - g) below (Feng et al. 2024, sec. 3.3's g).

    Every elementwise step is one torch call writing into a buffer of this function (out= or in place):
    no `torch.where` or bool mask (on CPU a where over a bool mask cost 10-15 multiplications of the same
    size) and as few fresh (B, T, H) tensors as the saved ones need (a new buffer's first touch costs page
    faults). g and g' use max instead of a branch: v + 1/2 >= sigmoid(v) exactly when v >= 0 (both are 1/2
    at 0, and sigmoid's slope is at most 1/4), and sigmoid' <= 1/4 < 1, so
        g(v) = max(v + 1/2, sigmoid(v)),    g'(v) = max([v >= 0], g(v) - g(v)^2)   ([v >= 0] = 1.0 or 0.0)."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, pre_z: Tensor, pre_h: Tensor, h0: Tensor) -> Tensor:
        B, T, H = pre_z.shape
        a_buf = pre_z.new_empty(B, T + 1, H)  # a_t at t and 0 at T: a_{t+1} for the adjoint is a view
        a = a_buf[:, :T]
        torch.neg(pre_z, out=a).sigmoid_()  # 1 - z = sigmoid(-pre_z), without the rounding of 1 - sigmoid(k)
        a_buf[:, T] = 0
        z = torch.sigmoid(pre_z)  # (B, T, H)
        cand = torch.sigmoid(pre_h)  # h~ = g(pre_h) = max(pre_h + 1/2, sigmoid(pre_h)), built in place
        h = torch.add(pre_h, 0.5)  # the buffer that becomes b = z h~ and then, scanned in place, h
        torch.maximum(h, cand, out=cand)
        torch.mul(z, cand, out=h)
        _affine_scan(a, h, h0, out=h)  # (B, T, H)
        ctx.save_for_backward(a_buf, z, cand, pre_h, h0, h)
        return h

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        # saved tensors stay as they are (backward may run again with retain_graph): new buffers only
        a_buf, z, cand, pre_h, h0, h = ctx.saved_tensors
        T = h.shape[1]
        a = a_buf[:, :T]
        lz = _affine_scan(a_buf[:, 1:], grad.contiguous(), None, reverse=True)  # lambda (B, T, H)
        d_h0 = a[:, 0] * lz[:, 0]  # a_1 lambda_1
        lz.mul_(z)  # lambda z, in lambda's place (lambda is not needed alone)
        d_pre_h = torch.ge(pre_h, 0, out=torch.empty_like(cand))  # [pre_h >= 0] as 1.0 / 0.0
        diff = torch.addcmul(cand, cand, cand, value=-1)  # g - g^2 = sigmoid' where pre_h < 0 (<= 1/4)
        torch.maximum(d_pre_h, diff, out=d_pre_h).mul_(lz)  # g'(pre_h) lambda z
        torch.sub(cand[:, 1:], h[:, :-1], out=diff[:, 1:])  # g(pre_h) - h_{t-1}, in the same buffer
        torch.sub(cand[:, 0], h0, out=diff[:, 0])
        d_pre_z = diff.mul_(lz).mul_(a)
        return d_pre_z, d_pre_h, d_h0


def _scan(pre_z: Tensor, pre_h: Tensor, h0: Tensor | None, reset: Tensor | None,
          log_space: bool, init: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """`mingru_scan` (linear) or `mingru_scan_log`: the pieces between resets, each scanned at once."""
    out_dtype = pre_z.dtype
    dt = _scan_dtype(out_dtype)
    pre_z, pre_h = pre_z.to(dt), pre_h.to(dt)
    if log_space:
        a = -F.softplus(pre_z)  # log(1 - z_t) = log sigmoid(-k), stable for any k
        b = F.logsigmoid(pre_z) + log_g(pre_h)  # log(z_t * h~_t)
        piece_fn = _scan_piece
    else:  # the linear scan takes the pre-activations (`_LinearScan`: the gates inside its own backward)
        a, b = pre_z, pre_h
        piece_fn = _scan_piece_linear
    h = None if h0 is None else h0.to(dt)
    T = pre_z.shape[1]
    bounds = [0, *segment_starts(reset), T]
    pieces = []
    for start, end in zip(bounds[:-1], bounds[1:]):
        if reset is not None and h is not None:
            h = h * (~reset[:, start]).to(dt).unsqueeze(-1)  # (B, H) * (B, 1)
        if init is not None:  # nonzero only where an email starts: a reset or t = 0, both piece starts
            h = init[:, start].to(dt) if h is None else h + init[:, start].to(dt)  # (B, H)
        piece = piece_fn(a[:, start:end], b[:, start:end], h)  # (B, end-start, H)
        pieces.append(piece)
        h = piece[:, -1]
    out = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=1)
    return out.to(out_dtype), out[:, -1].to(out_dtype)


def mingru_scan(
    pre_z: Tensor, pre_h: Tensor, h0: Tensor | None = None, reset: Tensor | None = None,
    init: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """All positions at once: pre-activations pre_z, pre_h (B, T, H), h0 (B, H) -> h (B, T, H), h_T (B, H).

    The chunked linear-space scan (`_scan_piece_linear`). `reset[b, t]` True treats lane b's h_{t-1} as
    zero: the sequence is cut where any lane resets (`segment_starts`); inside each piece resets happen
    only at its first position, where the carried state of the resetting lanes is zeroed (and `init`
    (B, T, H), the state an email starts from, added: `rnn.run_cell`).
    """
    return _scan(pre_z, pre_h, h0, reset, log_space=False, init=init)


def mingru_scan_log(
    pre_z: Tensor, pre_h: Tensor, h0: Tensor | None = None, reset: Tensor | None = None,
    init: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """`mingru_scan` in log space (Heinsen 2023, `_scan_piece`): the reference the linear scan is tested
    against. Nothing is set to -inf, so no inf or NaN reaches a gradient."""
    return _scan(pre_z, pre_h, h0, reset, log_space=True, init=init)


def mingru_sequential(
    pre_z: Tensor, pre_h: Tensor, h0: Tensor | None = None, reset: Tensor | None = None,
    init: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The same recurrence one position at a time (decoding): same arguments and results as `mingru_scan`."""
    B, T, H = pre_z.shape
    h = pre_z.new_zeros(B, H) if h0 is None else h0
    z = torch.sigmoid(pre_z)  # (B, T, H)
    one_minus_z = torch.sigmoid(-pre_z)  # 1 - z without the rounding of 1 - sigmoid(k)
    cand = g(pre_h)  # h~ (B, T, H)
    # per-step views taken once (slicing inside the loop costs O(T^2) in the backward pass)
    keeps = None if reset is None else (~reset).to(h.dtype).unsqueeze(-1).unbind(1)  # T x (B, 1)
    zs, one_minus_zs, cands = z.unbind(1), one_minus_z.unbind(1), cand.unbind(1)  # T x (B, H) each
    inits = None if init is None else init.to(h.dtype).unbind(1)  # T x (B, H)
    outs = []
    for t in range(T):
        if keeps is not None:
            h = h * keeps[t]  # (B, H) * (B, 1)
        if inits is not None:
            h = h + inits[t]  # the state an email starts from (zero where none starts)
        h = one_minus_zs[t] * h + zs[t] * cands[t]  # Feng et al. 2024, minGRU update
        outs.append(h)
    return torch.stack(outs, dim=1), h  # T x (B, H) -> (B, T, H)


MODES = ("auto", "scan", "sequential")


class MinGRU(nn.Module):
    """One minGRU layer: x (B, T, I) -> h (B, T, H), with the gate projections Linear_z and Linear_h."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.linear_z = nn.Linear(input_size, hidden_size)
        self.linear_h = nn.Linear(input_size, hidden_size)

    def forward(
        self, x: Tensor, h0: Tensor | None = None, reset: Tensor | None = None, mode: str = "auto",
        init: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """x (B, T, I), h0 (B, H) or None -> h (B, T, H), h_T (B, H); mode auto = sequential for T == 1, else scan.

        init (B, T, H) or None: the state added where an email starts (`mingru_scan`)."""
        if mode not in MODES:
            raise ValueError(f"minGRU mode must be one of {', '.join(MODES)}, not {mode!r}")
        pre_z, pre_h = self.linear_z(x), self.linear_h(x)  # (B, T, H) each
        if mode == "sequential" or (mode == "auto" and x.shape[1] == 1):
            return mingru_sequential(pre_z, pre_h, h0, reset, init)
        return mingru_scan(pre_z, pre_h, h0, reset, init)


class MinGRUMixer(nn.Module):
    """minGRU of width C = n_embd followed by an output projection, as a mixer.

    The hidden state is positive (g > 0, convex mixing), so the projection lets the block add signed
    updates to the residual stream. `mode` ("auto", "scan", "sequential") selects the computation.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.rnn = MinGRU(cfg.n_embd, cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.mode = "auto"

    def forward(self, x: Tensor, state: Tensor | None = None, reset: Tensor | None = None,
                init: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x (B, T, C), state = last h (B, C) or None, reset (B, T) bool or None -> y (B, T, C), h_T (B, C).

        init (B, T, C) or None: the state added where an email starts (`model.context=init_state`)."""
        check_mixer_inputs("minGRU", x, state, reset, init)
        h, h_last = self.rnn(x, state, reset, mode=self.mode, init=init)
        return self.proj(h), h_last
