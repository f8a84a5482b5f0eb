"""The context a model reads through cross-attention: its batch form and its encoder.

In email the context is the message being answered. `ContextBatch` carries, for each batch
lane, E contexts of at most Lc token ids (E = 1 for windows and decoding; a recurrent training chunk may
cross email boundaries, and each email in it has its own context) and, per query position, which of them
it reads. `ContextEncoder` turns the ids into rows once per call:

    ids (N, Lc) -> token embedding (shared with the LM) + learned positions 0..Lc-1 -> ctx_layers
    non-causal pre-norm blocks [x + SA(ln(x)) with a padding mask, x + MLP(ln(x))] -> LayerNorm

(a Transformer encoder, Vaswani et al. 2017, section 3.1: every context token sees every other one,
since the whole original is known before the reply is written). The decoder blocks then read the rows
through the lecture's cross-attention, CA(X, C) = softmax((X W_Q)(C W_K)^T / sqrt(d_k)) (C W_V) (slide
"Cross-attention gets queries and context from different sequences"). An email without context has an
all-padding context: its query rows are fully masked, attention gives exactly zero there (no NaN, see
`attention.stable_softmax`), and it trains like a model without cross-attention.

`ContextInit` is the other way a recurrent model may read it (`model.context=init_state`, a state
computed from the context): each context's rows are pooled into one vector by attention with
a learned query (zero at the start, so it starts as the mean of the real rows), and each recurrent
layer l starts every email from h0_l = tanh(W_l pool + b_l) instead of zero (the RNN encoder-decoder's
h0 = tanh(V c) from the encoder's summary c: Cho et al. 2014, "Learning Phrase Representations using RNN
Encoder-Decoder", the decoder of its appendix A). Cross-attention reads the original at every
position; the initial state must carry what matters of it in one C-vector per layer, which the
recurrence then keeps or forgets through its gates.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from seqlab.config import ModelConfig
from seqlab.models.attention import MultiHeadAttention, stable_softmax


@dataclass
class ContextBatch:
    """E contexts per lane and which one each query position reads.

    ids: (B, E, Lc) token ids, padded; keep: (B, E, Lc) bool, True on real tokens;
    segment: (B, T) long, the context index 0..E-1 position t reads (-1: none), or None when every
    position reads context 0 (then E must be 1; decoding and windows).
    """

    ids: Tensor
    keep: Tensor
    segment: Tensor | None = None

    def to(self, device: torch.device | str) -> ContextBatch:
        seg = self.segment.to(device) if self.segment is not None else None
        return ContextBatch(self.ids.to(device), self.keep.to(device), seg)

    def expand(self, b: int) -> ContextBatch:
        """The same contexts for b lanes: itself when it has b lanes already, else its one lane repeated."""
        if self.ids.size(0) == b:
            return self
        if self.ids.size(0) != 1 or self.segment is not None:
            raise ValueError(f"cannot spread a context batch of {self.ids.size(0)} lanes over {b} lanes")
        return ContextBatch(self.ids.expand(b, -1, -1), self.keep.expand(b, -1, -1))

    @classmethod
    def single(cls, ids: Tensor, keep: Tensor | None = None) -> ContextBatch:
        """One context per lane from (B, Lc) ids (and a (B, Lc) keep mask; None: all real)."""
        keep = torch.ones_like(ids, dtype=torch.bool) if keep is None else keep.bool()
        return cls(ids[:, None, :], keep[:, None, :])

    @classmethod
    def from_lists(cls, contexts: list[list[int]], device: torch.device | str | None = None) -> ContextBatch:
        """One context per lane from lists of ids (maybe empty); padded with 0 to at least one slot."""
        width = max(1, max((len(c) for c in contexts), default=0))
        ids = torch.zeros(len(contexts), 1, width, dtype=torch.long, device=device)
        keep = torch.zeros(len(contexts), 1, width, dtype=torch.bool, device=device)
        for b, c in enumerate(contexts):
            if c:
                ids[b, 0, : len(c)] = torch.tensor(c, dtype=torch.long, device=device)
                keep[b, 0, : len(c)] = True
        return cls(ids, keep)


def cross_mask(keep: Tensor, slot: Tensor, segment: Tensor | None) -> Tensor:
    """Which context rows each query may read.

    keep (B, S) real rows of the flattened contexts, slot (S,) the context index of each row; with
    segment (B, T): (B, T, S) bool, query t reads only rows of its own context; without: keep itself.
    """
    if segment is None:
        return keep
    return keep[:, None, :] & (segment[:, :, None] == slot[None, None, :])  # (B, T, S)


class _EncoderLayer(nn.Module):
    """One non-causal pre-norm block: self-attention over the context (padding masked), then an MLP."""

    def __init__(self, cfg: ModelConfig, index: int) -> None:
        super().__init__()
        width = max(1, cfg.mlp_ratio) * cfg.n_embd
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = MultiHeadAttention(cfg.n_embd, cfg.n_head, cfg.bias, cfg.dropout)
        self.attn.layer, self.attn.cross_kind = index, "context"  # recorded apart from the decoder's
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, width, bias=cfg.bias), nn.GELU(),
                                 nn.Linear(width, cfg.n_embd, bias=cfg.bias))
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, keep: Tensor) -> Tensor:
        h = self.ln_1(x)
        # keys and values from the same rows: self-attention without a causal mask, padding masked
        y, _ = self.attn(h, context=h, context_mask=keep)
        x = x + self.drop(y)
        return x + self.drop(self.mlp(self.ln_2(x)))


class ContextEncoder(nn.Module):
    """Context ids -> rows for cross-attention (module docstring); at most `ctx_block_size` tokens each."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.block_size = cfg.ctx_block_size
        self.pos = nn.Embedding(cfg.ctx_block_size, cfg.n_embd)  # learned positions of context tokens
        self.layers = nn.ModuleList(_EncoderLayer(cfg, i) for i in range(cfg.ctx_layers))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)

    def forward(self, wte: nn.Embedding, ctx: ContextBatch) -> tuple[Tensor, Tensor, Tensor]:
        """(rows (B, E*Lc, C), keep (B, E*Lc) bool, slot (E*Lc,) context index of each row).

        A context longer than `ctx_block_size` keeps its last tokens (the end of the original, next to
        the reply)."""
        ids, keep = ctx.ids, ctx.keep
        if ids.dim() != 3 or keep.shape != ids.shape:
            raise ValueError(f"a ContextBatch needs ids and keep of one (B, E, Lc) shape, got {tuple(ids.shape)} "
                             f"and {tuple(keep.shape)}")
        ids, keep = ids[..., -self.block_size:], keep[..., -self.block_size:]
        b, e, lc = ids.shape
        flat, flat_keep = ids.reshape(b * e, lc), keep.reshape(b * e, lc)  # (N, Lc), N = B * E
        # positions count real tokens only, so a left-padded context starts at 0 like a right-padded one
        positions = (flat_keep.long().cumsum(dim=1) - 1).clamp(min=0)  # (N, Lc)
        x = wte(flat) + self.pos(positions)  # (N, Lc, C)
        for layer in self.layers:
            x = layer(x, flat_keep)
        rows = self.ln_f(x).reshape(b, e * lc, -1)  # (B, E*Lc, C): lane b's contexts side by side
        slot = torch.arange(e, device=ids.device).repeat_interleave(lc)  # (E*Lc,)
        return rows, keep.reshape(b, e * lc), slot


class ContextInit(nn.Module):
    """Encoded contexts -> each recurrent layer's initial state at the positions where an email starts.

    `layers` lists the block indices whose mixer carries a recurrent state (all of them, or the hybrid's
    r layers); the others get None. An email without context (no real row) gets exactly zero: the
    state a model without context starts from.
    """

    def __init__(self, cfg: ModelConfig, layers: list[int]) -> None:
        super().__init__()
        self.n_layer = cfg.n_layer
        self.query = nn.Parameter(torch.zeros(cfg.n_embd))  # attention pooling; zero: the mean at the start
        self.proj = nn.ModuleDict({str(i): nn.Linear(cfg.n_embd, cfg.n_embd) for i in layers})

    def pool(self, rows: Tensor, keep: Tensor, n_ctx: int) -> tuple[Tensor, Tensor]:
        """rows (B, E*Lc, C), keep (B, E*Lc) -> pooled (B, E, C) and has (B, E) bool (any real row).

        a = softmax_j(q . r_j / sqrt(C)) over the real rows j of one context, pool = sum_j a_j r_j; a
        context with no real row pools to zero (`stable_softmax` of an all -inf row)."""
        b, s, c = rows.shape
        rows, keep = rows.reshape(b, n_ctx, s // n_ctx, c), keep.reshape(b, n_ctx, s // n_ctx)  # (B, E, Lc, .)
        score = (rows @ self.query.to(rows.dtype)) / c**0.5  # (B, E, Lc)
        weights = stable_softmax(score.masked_fill(~keep, float("-inf")))  # (B, E, Lc)
        return (weights.unsqueeze(-1) * rows).sum(dim=2), keep.any(dim=2)  # (B, E, C), (B, E)

    def forward(self, rows: Tensor, keep: Tensor, n_ctx: int, segment: Tensor | None,
                begin: Tensor) -> list[Tensor | None]:
        """Per block: (B, T, C), the state to add where begin (B, T) is True (an email starts there, its
        state just zeroed), zero elsewhere; None for a block without a recurrent state.

        segment (B, T): the context each position reads (-1: none), None: context 0 everywhere."""
        pooled, has = self.pool(rows, keep, n_ctx)  # (B, E, C), (B, E)
        seg = torch.zeros_like(begin, dtype=torch.long) if segment is None else segment  # (B, T)
        index = seg.clamp(min=0)  # (B, T): padding reads slot 0 and is masked below
        at = begin & (seg >= 0) & has.gather(1, index)  # (B, T) email starts that have a context
        mask = at.unsqueeze(-1).to(pooled.dtype)  # (B, T, 1)
        gather = index.unsqueeze(-1).expand(-1, -1, pooled.size(-1))  # (B, T, C)
        out: list[Tensor | None] = []
        for i in range(self.n_layer):
            if str(i) not in self.proj:
                out.append(None)
                continue
            h0 = torch.tanh(self.proj[str(i)](pooled))  # (B, E, C): one initial state per context
            out.append(h0.gather(1, gather) * mask)  # (B, T, C)
        return out
