"""Recurrent mixers: the Elman RNN and the GRU, written gate by gate, plus a fused path.

Holds `RNNCell` and `GRUCell` (one transition each), `run_cell` (the one time loop both share),
`segment_starts` (where a batch must be cut so per-lane resets can be applied between segments),
`check_mixer_inputs` (the state and reset shapes every recurrent mixer accepts; minGRU uses both) and
`RecurrentMixer` (the `(x, state, reset) -> (y, state)` mixer that the LM shell stacks).

The lecture ("Recurrent Models and Attention", slide "Shared recurrent computation learns from every
prediction loss"): "Reuse one transition across positions; BPTT accumulates gradients through every
use" and "GRU gates mix retained state with candidate content".

Each cell *is* a one-layer, batch-first `torch.nn.RNN` / `torch.nn.GRU` (a subclass), so its parameters
are exactly theirs: `weight_ih_l0 (G*H, I)`, `weight_hh_l0 (G*H, H)`, `bias_ih_l0 (G*H)`,
`bias_hh_l0 (G*H)` with G = 1 (RNN) or 3 (GRU, gate rows in PyTorch's order r, z, n). The explicit loop
here and PyTorch's fused kernel (`fused`) therefore read the very same tensors: no copy, no sync, and a
`torch.nn.GRU` state dict loads into a `GRUCell` unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.config import ModelConfig
from seqlab.models.gru_backward import gru_sequence


class _CellMixin:
    """What both cells share: input projection for all positions, one step, PyTorch's fused kernel."""

    weight_ih_l0: Tensor
    bias_ih_l0: Tensor

    def project(self, x: Tensor) -> Tensor:
        """W_ih x_t + b_ih for every t in one matmul: (B, T, I) -> (B, T, G*H).

        The input half of every gate does not depend on h, so it leaves the time loop; only the
        recurrent matmul W_hh h_{t-1} stays inside it.
        """
        return F.linear(x, self.weight_ih_l0, self.bias_ih_l0)

    def forward(self, x_t: Tensor, h: Tensor) -> Tensor:  # type: ignore[override]
        """One transition from a raw input: x_t (B, I), h (B, H) -> h_t (B, H)."""
        return self.step(self.project(x_t), h)  # type: ignore[attr-defined]  # each cell defines step

    def fused(self, x: Tensor, h0: Tensor) -> tuple[Tensor, Tensor]:
        """PyTorch's fused kernel on the same parameters: x (B, T, I), h0 (B, H) -> (B, T, H), (B, H)."""
        # nn.RNN/nn.GRU want the state as (num_layers=1, B, H).
        # super(_CellMixin, ...) skips our one-step forward and reaches nn.RNN.forward / nn.GRU.forward.
        out, h_n = super().forward(x, h0.unsqueeze(0).contiguous())  # type: ignore[misc]
        return out, h_n.squeeze(0)


class RNNCell(_CellMixin, nn.RNN):
    """Elman cell: h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh), parameters of `torch.nn.RNN`."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        nn.RNN.__init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", batch_first=True)

    def step(self, xp_t: Tensor, h: Tensor) -> Tensor:
        """xp_t = W_ih x_t + b_ih (B, H), h = h_{t-1} (B, H) -> h_t (B, H)."""
        return torch.tanh(xp_t + F.linear(h, self.weight_hh_l0, self.bias_hh_l0))


class GRUCell(_CellMixin, nn.GRU):
    """Gated recurrent unit with PyTorch's equations and gate order (r, z, n), parameters of `torch.nn.GRU`."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        nn.GRU.__init__(self, input_size, hidden_size, num_layers=1, batch_first=True)

    def gates(self, xp_t: Tensor, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The three gate activations r, z, n, each (B, H), from xp_t = W_ih x_t + b_ih (B, 3H) and h (B, H)."""
        hp = F.linear(h, self.weight_hh_l0, self.bias_hh_l0)  # W_hh h_{t-1} + b_hh: (B, 3H)
        x_r, x_z, x_n = xp_t.chunk(3, dim=-1)  # (B, 3H) -> 3 x (B, H), rows in PyTorch's order r, z, n
        h_r, h_z, h_n = hp.chunk(3, dim=-1)
        # Reset gate r: how much of the retained state the candidate may read.
        r = torch.sigmoid(x_r + h_r)
        # Update gate z: how much of the retained state h_{t-1} is kept as it is.
        z = torch.sigmoid(x_z + h_z)
        # Candidate content n: new information, computed from the input and the r-filtered state.
        n = torch.tanh(x_n + r * h_n)
        return r, z, n

    def step(self, xp_t: Tensor, h: Tensor) -> Tensor:
        """One GRU transition: (B, 3H), (B, H) -> (B, H)."""
        r, z, n = self.gates(xp_t, h)
        # Lecture: "GRU gates mix retained state with candidate content".
        return (1.0 - z) * n + z * h


Cell = RNNCell | GRUCell


def run_cell(
    cell: Cell,
    x: Tensor,
    h0: Tensor | None = None,
    reset: Tensor | None = None,
    gate_log: list[tuple[Tensor, Tensor]] | None = None,
    init: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The explicit time loop shared by both cells: x (B, T, I) -> outputs (B, T, H), h_T (B, H).

    `reset[b, t]` True zeroes lane b's state before step t (an email starts at t); `init` (B, T, H), zero
    except where an email starts (a reset, or t = 0), is then added: the state the email starts from
    (`model.context=init_state`). When `gate_log` is a list and the cell is a GRU, the (r, z) gates of
    every step, each (B, H), are appended to it.
    """
    B, T, _ = x.shape
    h = x.new_zeros(B, cell.hidden_size) if h0 is None else h0
    # The input projections of all positions at once, split into T views of (B, G*H) ONCE: indexing
    # xp[:, t] inside the loop would make every step's backward scatter into a full (B, T, G*H) zero
    # tensor, so the backward pass would cost O(T^2) memory traffic.
    xps = cell.project(x).unbind(1)
    keeps = None if reset is None else (~reset).to(h.dtype).unsqueeze(-1).unbind(1)  # T x (B, 1)
    inits = None if init is None else init.to(h.dtype).unbind(1)  # T x (B, H)
    outs = []
    for t in range(T):
        if keeps is not None:
            h = h * keeps[t]  # (B, H) * (B, 1): lanes that start an email forget the previous one
        if inits is not None:
            h = h + inits[t]  # ... and start from their context's state (zero elsewhere)
        if gate_log is not None and isinstance(cell, GRUCell):
            r, z, n = cell.gates(xps[t], h)
            gate_log.append((r, z))
            h = (1.0 - z) * n + z * h
        else:
            # The same transition (the same parameter tensors) at every position: backpropagation
            # through time sums each use's gradient into them (lecture: "BPTT accumulates gradients
            # through every use").
            h = cell.step(xps[t], h)
        outs.append(h)
    return torch.stack(outs, dim=1), h  # T x (B, H) -> (B, T, H)


def segment_starts(reset: Tensor | None) -> list[int]:
    """Positions t > 0 where any lane resets: cutting there leaves each piece with resets only at its start."""
    if reset is None:
        return []
    any_reset = reset[:, 1:].any(dim=0)  # (T-1,)
    return (any_reset.nonzero().flatten() + 1).tolist()


def check_mixer_inputs(kind: str, x: Tensor, state: Tensor | None, reset: Tensor | None,
                       init: Tensor | None = None) -> None:
    """The recurrent mixers' argument check: for x (B, T, C), state must be (B, C), reset (B, T) and init
    (B, T, C), or None.

    A wrong shape would otherwise broadcast silently (a (1, C) state over every lane) or fail deep inside
    the loop; a ValueError naming the argument is what the mixer contract promises.
    """
    B, T, C = x.shape
    if state is not None and state.shape != (B, C):
        raise ValueError(f"{kind} state must have shape {(B, C)}, not {tuple(state.shape)}")
    if reset is not None and reset.shape != (B, T):
        raise ValueError(f"reset must have shape {(B, T)}, not {tuple(reset.shape)}")
    if init is not None and init.shape != (B, T, C):
        raise ValueError(f"init must have shape {(B, T, C)}, not {tuple(init.shape)}")


def run_fused(cell: Cell, x: Tensor, h0: Tensor | None = None, reset: Tensor | None = None,
              init: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """`run_cell`'s result through PyTorch's fused kernel: the sequence is cut where any lane resets and
    the resetting lanes' state is zeroed (then `init` added: nonzero only at resets and t = 0, so only at
    the pieces' starts) between pieces. x (B, T, I) -> (B, T, H), (B, H)."""
    B, T, _ = x.shape
    h = x.new_zeros(B, cell.hidden_size) if h0 is None else h0
    bounds = [0, *segment_starts(reset), T]
    outs = []
    for start, end in zip(bounds[:-1], bounds[1:]):
        if reset is not None:
            h = h * (~reset[:, start]).to(h.dtype).unsqueeze(-1)  # (B, H) * (B, 1)
        if init is not None:
            h = h + init[:, start].to(h.dtype)  # (B, H): the context's state where an email starts
        out, h = cell.fused(x[:, start:end], h)  # (B, end-start, H), (B, H)
        outs.append(out)
    return (outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)), h


class RecurrentMixer(nn.Module):
    """An RNN or GRU layer of width C = n_embd as a mixer: `(x (B,T,C), state (B,C), reset (B,T)) -> (y, state)`.

    The fused path is used when `cfg.fused_rnn` is true and nothing asks for per-step inspection: PyTorch's
    kernel, except that a GRU computing a gradient on the CPU runs `gru_backward.gru_sequence` (its time loop
    with a hand-written backward, faster to train there: `seqlab bench`, layers);
    `force_explicit` (or `with mixer.explicit():`) selects the gate-by-gate loop, and
    `record_gates = True` (GRU only) also stores the last forward's gates in `last_gates`
    as {'r': (B, T, C), 'z': (B, T, C)} (detached).
    """

    def __init__(self, cfg: ModelConfig, cell: str) -> None:
        super().__init__()
        if cell not in ("rnn", "gru"):
            raise ValueError(f"RecurrentMixer cell must be 'rnn' or 'gru', not {cell!r}")
        self.kind = cell
        self.cell: Cell = RNNCell(cfg.n_embd, cfg.n_embd) if cell == "rnn" else GRUCell(cfg.n_embd, cfg.n_embd)
        self.fused_rnn = cfg.fused_rnn
        self.force_explicit = False
        self.record_gates = False
        self.last_gates: dict[str, Tensor] | None = None

    @contextlib.contextmanager
    def explicit(self) -> Iterator[RecurrentMixer]:
        """Run the gate-by-gate loop inside the block, whatever `cfg.fused_rnn` says."""
        before, self.force_explicit = self.force_explicit, True
        try:
            yield self
        finally:
            self.force_explicit = before

    def uses_fused(self) -> bool:
        return self.fused_rnn and not self.force_explicit and not self.record_gates

    def forward(self, x: Tensor, state: Tensor | None = None, reset: Tensor | None = None,
                init: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x (B, T, C), state h (B, C) or None (zeros), reset (B, T) bool or None -> y (B, T, C), h_T (B, C).

        init (B, T, C) or None: added to the state where an email starts (`run_cell`)."""
        check_mixer_inputs(self.kind, x, state, reset, init)
        if self.uses_fused() and self.kind == "gru" and init is None \
                and torch.is_grad_enabled() and x.device.type == "cpu":
            # training on the CPU: the time loop with a hand-written backward, resets applied in place
            # (gru_backward.py); on a GPU cuDNN's fused kernel stays far ahead of any Python-level loop
            h0 = x.new_zeros(x.size(0), self.cell.hidden_size) if state is None else state
            keep = None if reset is None else (~reset).to(x.dtype)
            y = gru_sequence(self.cell.project(x), h0, self.cell.weight_hh_l0, self.cell.bias_hh_l0, keep)
            return y, y[:, -1]
        if self.uses_fused():
            return run_fused(self.cell, x, state, reset, init)
        log: list[tuple[Tensor, Tensor]] | None = [] if self.record_gates and self.kind == "gru" else None
        y, h = run_cell(self.cell, x, state, reset, gate_log=log, init=init)
        if log:
            # T x (B, C) -> (B, T, C) for each gate.
            self.last_gates = {
                "r": torch.stack([r for r, _ in log], dim=1).detach(),
                "z": torch.stack([z for _, z in log], dim=1).detach(),
            }
        return y, h
