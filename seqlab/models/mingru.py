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

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.config import ModelConfig
from seqlab.models.rnn import check_mixer_inputs, segment_starts


def g(v: Tensor) -> Tensor:
    """The paper's positive activation (Feng et al. 2024, Sec. 3.3): v + 0.5 for v >= 0, sigmoid(v) below."""
    return torch.where(v >= 0, F.relu(v) + 0.5, torch.sigmoid(v))


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


CHUNK = 16  # positions per chunk of the linear scan: measured fastest of 16, 32 and 64 at T = 512..8192


def _scan_piece_linear(a: Tensor, b: Tensor, h0: Tensor | None, chunk: int = CHUNK) -> Tensor:
    """The same as `_scan_piece`, in linear space: a, b (B, T, H) with a_t in (0, 1) -> h (B, T, H).

    Two levels (a chunked scan, as in Blelloch 1990, section 1.4). Inside chunks of `chunk` positions,
    log2(chunk) doubling steps (Hillis & Steele 1986) turn (a_t, b_t) into (A_t, B_t) with
    h_t = A_t h_in + B_t, h_in the state entering the chunk: step d combines position t with t - d,
        (A, B)_t <- (A_t A_{t-d}, A_t B_{t-d} + B_t).
    Then one short loop over the T / chunk chunks carries the state from each chunk's end to the next.
    Products of gates in (0, 1) only shrink, so nothing overflows, no log or exp rounds the values
    (relative error ~4e-7 in float32 at T = 8192, against ~1e-3 for the log-space form), and the work is
    O(T log chunk) instead of the O(T log T) of doubling over the whole sequence.
    """
    B, T, H = a.shape
    pad = (-T) % chunk
    if pad:  # a = 1, b = 0 past the end: the state passes through unchanged
        a = F.pad(a, (0, 0, 0, pad), value=1.0)
        b = F.pad(b, (0, 0, 0, pad))
    n = (T + pad) // chunk
    # updated in place (no autograd runs through here: `_LinearScan` is the backward); a copy each, so
    # the caller's a and b stay as they were
    A, Bv = a.reshape(B, n, chunk, H).clone(), b.reshape(B, n, chunk, H).clone()  # (B, n, c, H)
    d = 1
    while d < chunk:
        # the right-hand sides are new tensors read from the values before this step (B first: it reads A)
        Bv[:, :, d:] += A[:, :, d:] * Bv[:, :, :-d]
        A[:, :, d:] = A[:, :, d:] * A[:, :, :-d]
        d *= 2
    h = a.new_zeros(B, H) if h0 is None else h0
    a_end, b_end = A[:, :, -1].unbind(1), Bv[:, :, -1].unbind(1)  # n x (B, H)
    entering = []
    for k in range(n):
        entering.append(h)
        h = a_end[k] * h + b_end[k]
    h_in = torch.stack(entering, dim=1)  # (B, n, H): the state entering each chunk
    return Bv.addcmul_(A, h_in.unsqueeze(2)).reshape(B, n * chunk, H)[:, :T]


class _LinearScan(torch.autograd.Function):
    """`_scan_piece_linear` with its adjoint as the backward pass, instead of autograd through every
    doubling step (whose slices and concatenations cost a zero-filled buffer and a copy each, about half
    of the minGRU layer's training step at T = 2048). For h_t = a_t h_{t-1} + b_t and g_t = dL/dh_t, the
    adjoint lambda_t = dL/dh_t through all later steps obeys the same recurrence backwards in time,
        lambda_t = a_{t+1} lambda_{t+1} + g_t,
    so it is the same scan run on the reversed sequence; then dL/db_t = lambda_t,
    dL/da_t = lambda_t h_{t-1} and dL/dh0 = a_1 lambda_1 (h_0 = h0)."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, a: Tensor, b: Tensor, h0: Tensor) -> Tensor:
        h = _scan_piece_linear(a, b, h0)  # (B, T, H)
        ctx.save_for_backward(a, h, h0)
        return h

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, g: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        a, h, h0 = ctx.saved_tensors
        a_next = torch.cat([a[:, 1:], torch.zeros_like(a[:, :1])], dim=1)  # a_{t+1}; nothing after the end
        lam = _scan_piece_linear(a_next.flip(1), g.flip(1), None).flip(1)  # (B, T, H)
        h_prev = torch.cat([h0.unsqueeze(1), h[:, :-1]], dim=1)  # h_{t-1} (B, T, H)
        return lam * h_prev, lam, a[:, 0] * lam[:, 0]


def _scan_piece_adjoint(a: Tensor, b: Tensor, h0: Tensor | None) -> Tensor:
    """The linear scan with the adjoint backward (`_LinearScan`); h0 None is a zero state."""
    return _LinearScan.apply(a, b, a.new_zeros(a.shape[0], a.shape[2]) if h0 is None else h0)


def _scan(pre_z: Tensor, pre_h: Tensor, h0: Tensor | None, reset: Tensor | None,
          log_space: bool, init: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """`mingru_scan` (linear) or `mingru_scan_log`: the pieces between resets, each scanned at once."""
    out_dtype = pre_z.dtype
    dt = _scan_dtype(out_dtype)
    pre_z, pre_h = pre_z.to(dt), pre_h.to(dt)
    if log_space:
        a = -F.softplus(pre_z)  # log(1 - z_t) = log sigmoid(-k), stable for any k
        b = F.logsigmoid(pre_z) + log_g(pre_h)  # log(z_t * h~_t)
    else:
        a = torch.sigmoid(-pre_z)  # 1 - z_t without the rounding of 1 - sigmoid(k)
        b = torch.sigmoid(pre_z) * g(pre_h)  # z_t * h~_t
    piece_fn = _scan_piece if log_space else _scan_piece_adjoint
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

        init (B, T, C) or None: the state added where an email starts (`model.ctx_mode=init_state`)."""
        check_mixer_inputs("minGRU", x, state, reset, init)
        h, h_last = self.rnn(x, state, reset, mode=self.mode, init=init)
        return self.proj(h), h_last
