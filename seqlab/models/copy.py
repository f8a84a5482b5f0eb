"""A copy (pointer) head over the context: the next token may be copied from the message being answered.

Replies repeat names, dates, subjects and phrases of the message they answer. A pointer-generator
(See et al. 2017, "Get To The Point", section 2.2) mixes, at every position t, the model's vocabulary
distribution with a distribution over the context's own tokens:

    a_t      = softmax_j(q_t . k_j / sqrt(C))            attention over the S context tokens (padding masked)
    c_t      = sum_j a_tj r_j                            what the pointer read (the context vector)
    g_t      = sigmoid(w_g . [h_t; c_t] + b_g)            p_gen: generate (1) or copy (0)
    p_t(w)   = g_t * softmax(head(h_t))_w + (1 - g_t) * sum_{j: ctx_j = w} a_tj

with h_t the LM's last hidden state (after ln_f), q_t = W_q h_t, r_j the context rows (the context
encoder's output: `model.ctx_layers` blocks over token embedding + position, or with ctx_layers=0 just
the normalized embedding + position, the cheap keys) and k_j = W_k r_j + W_p e(ctx_{j-1}): the key also
holds the embedding of the token before j, so the reply's current token can find where the same token
stands in the original and copy what follows it (the induction pattern, in one attention step).

The LM returns log p_t as its logits: the log of a normalized mixture, so softmax gives p back and the
one cross-entropy outside the model stays right. It is computed in log space (logaddexp of the two
weighted terms; a word absent from the context has copy log-probability -inf, never log 0 of a
gradient). A position with no context token to read gets g = 1 exactly: its distribution is the
vocabulary one, bit for bit. `PointerKeys` holds what the pointer reads, computed once per email and
kept in the LM's state for incremental decoding (like the cross-attention's `CrossKV`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.config import ModelConfig
from seqlab.models.attention import stable_softmax
from seqlab.models.recorder import active_recorder

TINY = 1e-30  # copy probabilities below this are dropped (float32 normals reach 1.2e-38)


@dataclass
class PointerKeys:
    """What the pointer reads of a lane's contexts, kept in the state: keys and rows (B, S, C), the
    token id each row copies (B, S) long, keep (B, S) bool (False on padding), slot (B, S) long: the first
    real row holding row j's token (j itself for padding), first (B, S) bool: row j is that first row."""

    keys: Tensor
    rows: Tensor
    ids: Tensor
    keep: Tensor
    slot: Tensor
    first: Tensor

    @classmethod
    def build(cls, keys: Tensor, rows: Tensor, ids: Tensor, keep: Tensor) -> PointerKeys:
        """Keys, rows, ids and keep -> with each row's first row of the same token computed once."""
        s = ids.size(1)
        same = (ids[:, :, None] == ids[:, None, :]) & keep[:, None, :]  # (B, S, S): row j' real, j's token
        # the first True of each row (argmax returns the first maximum); a padding row maps to itself
        slot = torch.where(keep, same.to(torch.uint8).argmax(dim=-1), torch.arange(s, device=ids.device))
        first = keep & (slot == torch.arange(s, device=ids.device))  # (B, S)
        return cls(keys, rows, ids, keep, slot, first)


def previous_ids(ids: Tensor, keep: Tensor) -> tuple[Tensor, Tensor]:
    """ids, keep (N, Lc) -> the id before each position in its context and whether there is one (N, Lc)."""
    prev = torch.zeros_like(ids)
    prev[:, 1:] = ids[:, :-1]
    has = torch.zeros_like(keep)
    has[:, 1:] = keep[:, :-1] & keep[:, 1:]  # the first real token (after left padding) has none
    return prev, has


class CopyHead(nn.Module):
    """The pointer and its gate (module docstring): `keys` once per context, `forward` per call."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        c = cfg.n_embd
        self.block_size = cfg.ctx_block_size
        self.query = nn.Linear(c, c, bias=False)  # W_q: h_t -> q_t
        self.key = nn.Linear(c, c, bias=False)  # W_k: context row -> key
        self.prev = nn.Linear(c, c, bias=False)  # W_p: the previous context token's embedding -> key
        self.gate = nn.Linear(2 * c, 1)  # [h_t; c_t] -> logit of g_t (p_gen)
        # attention recorders label the pointer's weights as one more row after the last block
        self.layer = cfg.n_layer

    def keys(self, rows: Tensor, ids: Tensor, keep: Tensor, wte: nn.Embedding) -> PointerKeys:
        """rows (B, E*Lc, C) from the context encoder; ids, keep (B, E, Lc) of the contexts (already cut
        to ctx_block_size as the encoder cut them) -> the pointer's keys."""
        b, e, lc = ids.shape
        prev, has = previous_ids(ids.reshape(b * e, lc), keep.reshape(b * e, lc))  # (N, Lc)
        before = wte(prev) * has.unsqueeze(-1).to(rows.dtype)  # (N, Lc, C): zero where nothing precedes
        keys = self.key(rows) + self.prev(before.reshape(b, e * lc, -1))  # (B, S, C), S = E*Lc
        return PointerKeys.build(keys, rows, ids.reshape(b, e * lc), keep.reshape(b, e * lc))

    def vocab_only(self, logits: Tensor) -> Tensor:
        """No context to copy from: log p = log_softmax(head) (g = 1), in the dtype `forward` returns."""
        return F.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)

    def forward(self, h: Tensor, logits: Tensor, ptr: PointerKeys, mask: Tensor) -> Tensor:
        """h (B, T, C) after ln_f, logits (B, T, V) of the vocabulary head, mask (B, S) or (B, T, S) bool
        (which context rows each position may read) -> log p (B, T, V) of the mixture, in float32 at
        least (bf16 autocast computes the mixture in float32; a float64 model stays float64)."""
        dt = torch.promote_types(logits.dtype, torch.float32)
        h32, logits = h.to(dt), logits.to(dt)
        b, t, _ = h.shape
        mask = (mask[:, None, :] if mask.dim() == 2 else mask).expand(b, t, -1)  # (B, T, S)
        q = self.query(h)  # (B, T, C)
        score = (q @ ptr.keys.transpose(1, 2)).to(dt) / q.size(-1) ** 0.5  # (B, T, S)
        a = stable_softmax(score.masked_fill(~mask, float("-inf")))  # (B, T, S); 0 where nothing to read
        if (rec := active_recorder()) is not None:
            rec.add(self.layer, "pointer", a[:, None])  # (B, 1, T, S): one head
        read = a @ ptr.rows.to(dt)  # (B, T, C): c_t
        z = self.gate(torch.cat((h32, read), dim=-1).to(self.gate.weight.dtype)).squeeze(-1).to(dt)  # (B, T)
        has = mask.any(dim=-1)  # (B, T): whether position t has a context token to copy
        log_gen = torch.where(has, F.logsigmoid(z), torch.zeros_like(z))  # log g_t; g = 1 exactly without
        log_copy = torch.where(has, F.logsigmoid(-z), torch.full_like(z, float("-inf")))  # log (1 - g_t)
        # Only the context's own tokens differ from g p_v: log p = log g + log p_v everywhere (one dense
        # (B, T, V) pass), then at each distinct context token w, once, add
        #   log p(w) - log(g p_v(w)) = softplus(log((1 - g) p_c(w)) - log(g p_v(w)))
        # computed on (B, T, S) (S context rows, not V tokens). p_c(w) at row j = sum over rows j' holding
        # the same token of a_tj'; the first real row of each token carries it, the rest add 0 (scattered
        # once, so the gradient is not counted twice).
        ids, first = ptr.ids, ptr.first  # (B, S) each
        # p_c at the first row of each token: the weights of all its rows summed there, (B, T, S)
        p_c = torch.zeros_like(a).scatter_add_(2, ptr.slot[:, None, :].expand(b, t, -1), a)
        log_pv = F.log_softmax(logits, dim=-1)  # (B, T, V); the fused kernel (logsumexp is slower on CPU)
        out = log_pv + log_gen[..., None]  # (B, T, V): log(g p_v), a new tensor changed in place below
        index = ids[:, None, :].expand(b, t, -1)  # (B, T, S)
        base = log_pv.gather(2, index) + log_gen[..., None]  # (B, T, S): log(g p_v(ctx_j)), finite
        # log((1 - g) p_c): -inf where nothing is copied (weights under TINY, an underflowed softmax tail,
        # count as nothing, so 1 / p_c in the gradient stays finite; log is taken of 1 there)
        present = first[:, None, :] & (p_c > TINY)  # (B, T, S)
        log_pc = torch.log(torch.where(present, p_c, torch.ones_like(p_c)))
        lift = torch.where(present, F.softplus(log_copy[..., None] + log_pc - base), torch.zeros_like(p_c))
        return out.scatter_add_(2, index, lift)  # (B, T, V), in place: `out` is not saved for backward

