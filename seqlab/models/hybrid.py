"""The hybrid family: recurrent blocks with local (sliding-window) attention blocks among them.

`model.mixer=hybrid` builds one mixer per layer from `model.hybrid_pattern`, tiled over `n_layer`:
`r` is a recurrent layer (`model.hybrid_cell`: the GRU of `rnn.py` or the minGRU of `mingru.py`), `a` is
`LocalAttention`, causal attention over the last `model.attn_window` tokens only. This is the design of
Griffin (De et al. 2024, "Griffin: Mixing Gated Linear Recurrences with Local Attention for Efficient
Language Models", section 2: two recurrent blocks, then one local MQA block) and of the SHA-RNN (Merity
2019, "Single Headed Attention RNN"): the recurrence carries an unbounded summary of the past in a
fixed-size state, and the local attention copies exact tokens from the recent window, which a
fixed-size state blurs. The LM shell around the mixers (pre-norm residual blocks, MLPs) is unchanged.

Because every layer's state is bounded (a hidden vector, or at most attn_window - 1 cached keys and
values), a hybrid reads a stream of any length: it trains by truncated BPTT on streams like the
recurrent mixers (`data.mode=auto` gives `stream`), is scored on whole emails, and decodes without a
context limit. The local attention's state is a dict of tensors (so it is saved with weights_only=True
and reordered by beam search like any other state):

    k, v  (B, H, L, D)   keys and values of the last L <= attn_window - 1 positions
    doc   (B, L) long    which email of the lane each cached key belongs to
    cur   (B,) long      the email the lane is in now; a reset flag starts the next one
A query sees a key only if it lies in its window AND in the same email, so a lane that moves on to the
next email never attends to the previous one (the recurrent layers zero their state at the same flag).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seqlab.config import ModelConfig
from seqlab.models.attention import MultiHeadAttention


class LocalAttention(MultiHeadAttention):
    """Causal multi-head self-attention restricted to the last `window` positions of the same email.

    Mixer contract: `(x (B, T, C), state dict or None, reset (B, T) bool or None) -> (y (B, T, C), state)`.
    No rotary or ALiBi positions: order reaches it through the recurrent layers (and any additive positions).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg.n_embd, cfg.n_head, cfg.bias, cfg.dropout, None, qk_norm=cfg.qk_norm)
        self.window = cfg.attn_window

    def forward(  # type: ignore[override]  # the mixer contract, not MultiHeadAttention's cross-attention one
        self, x: Tensor, state: dict[str, Tensor] | None = None, reset: Tensor | None = None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        b, t, _ = x.shape
        if reset is not None and reset.shape != (b, t):
            raise ValueError(f"reset must have shape {(b, t)}, not {tuple(reset.shape)}")
        q = self._heads(self.q_proj(x))  # (B, H, T, D)
        k, v = (self._heads(z) for z in self.kv_proj(x).split(self.n_embd, dim=-1))  # (B, H, T, D) each
        q, k = self._qk_norm(q, k)
        cur = state["cur"] if state is not None else torch.zeros(b, dtype=torch.long, device=x.device)  # (B,)
        flags = reset.long() if reset is not None else torch.zeros(b, t, dtype=torch.long, device=x.device)
        doc = cur[:, None] + flags.cumsum(dim=1)  # (B, T): the email of each new token, per lane
        if state is not None:
            k, v = torch.cat((state["k"], k), dim=2), torch.cat((state["v"], v), dim=2)  # (B, H, L + T, D)
            kdoc = torch.cat((state["doc"], doc), dim=1)  # (B, L + T)
        else:
            kdoc = doc
        y = self._attend(q, k, v, self.window_mask(doc, kdoc, q.dtype), False, "self")
        start = max(0, k.size(2) - (self.window - 1))  # the keys a later query can still reach
        new = {"k": k[:, :, start:], "v": v[:, :, start:], "doc": kdoc[:, start:], "cur": doc[:, -1]}
        return y, new

    def window_mask(self, qdoc: Tensor, kdoc: Tensor, dtype: torch.dtype) -> Tensor:
        """Additive (B, 1, T, L + T): query i (at index L + i of the keys) may see key j iff
        0 <= (L + i) - j < window and both are in the same email. The diagonal always qualifies, so no
        row is fully masked."""
        t, lk = qdoc.size(1), kdoc.size(1)
        qi = torch.arange(lk - t, lk, device=qdoc.device)[:, None]  # (T, 1)
        kj = torch.arange(lk, device=qdoc.device)[None, :]  # (1, L + T)
        near = (kj <= qi) & (qi - kj < self.window)  # (T, L + T)
        keep = near[None] & (qdoc[:, :, None] == kdoc[:, None, :])  # (B, T, L + T)
        zero = torch.zeros((), dtype=dtype, device=qdoc.device)
        return torch.where(keep, zero, torch.full_like(zero, float("-inf")))[:, None]


def hybrid_mixer(cfg: ModelConfig, layer: int) -> nn.Module:
    """The mixer of block `layer` of a hybrid: `cfg.layer_kinds()[layer]` is r (recurrent) or a (local attention)."""
    kind = cfg.layer_kinds()[layer]
    if kind == "a":
        return LocalAttention(cfg)
    if cfg.hybrid_cell == "mingru":
        from seqlab.models.mingru import MinGRUMixer

        return MinGRUMixer(cfg)
    from seqlab.models.rnn import RecurrentMixer

    return RecurrentMixer(cfg, "gru")

