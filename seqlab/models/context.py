"""The context a model reads through cross-attention: its batch form and its encoder.

In email the context is the message being answered (issue 11). `ContextBatch` carries, for each batch
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
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from seqlab.config import ModelConfig
from seqlab.models.attention import MultiHeadAttention


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
