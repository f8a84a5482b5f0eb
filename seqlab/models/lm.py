"""The language-model shell shared by every mixer family, and `build_model`.

    idx (B, T) -> token embedding (+ additive positions) -> n_layer blocks -> LayerNorm -> head -> logits

Each block (models/block.py) is pre-norm residual (GPT-2, Radford et al. 2019):
    x = x + mixer(ln(x))                     attention, RNN, GRU or minGRU (the `MIXERS` registry),
                                             or per layer for the hybrid (`make_mixer`)
    x = x + xattn(ln(x), context)            only with cfg.context=cross or cross+copy
    x = x + mlp(ln(x))                       only with cfg.mlp_ratio > 0
With a copy head (cfg.context=...+copy or pointer) the head's distribution is mixed with a pointer's
over the context tokens and the model returns the mixture's log-probabilities as its logits
(models/copy.py, See et al. 2017).
The head shares its matrix with the token embedding by default (Press & Wolf 2017). The loss is
computed outside the model. Every mixer follows one contract:
    mixer(x (B, T, C), state=None, reset=None (B, T) bool) -> (y (B, T, C), new state)
so that feeding tokens one at a time with the returned state equals one full forward pass. With
cfg.context=init_state the recurrent mixers also take init (B, T, C), the state an email starts from
(models/context_encoder.py `ContextInit`), in place of the cross-attention.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.config import ModelConfig
from seqlab.models.attention import MultiHeadAttention
from seqlab.models.block import MIXERS, Block
from seqlab.models.context_encoder import ContextBatch, ContextEncoder, ContextInit
from seqlab.models.context_reader import context_in, reader_for
from seqlab.models.copy import CopyHead, PointerKeys
from seqlab.models.cpu_linear import linear
from seqlab.models.kv_cache import CrossKV, KVCache
from seqlab.models.positional import build_positions


def map_tensors(obj: Any, fn: Callable[[Tensor], Tensor]) -> Any:
    """Apply fn to every tensor inside a state (tensors, tuples, lists, dicts, dataclasses); copy the rest."""
    if isinstance(obj, Tensor):
        return fn(obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(map_tensors(o, fn) for o in obj)
    if isinstance(obj, dict):
        return {key: map_tensors(o, fn) for key, o in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = dataclasses.fields(obj)
        return dataclasses.replace(obj, **{f.name: map_tensors(getattr(obj, f.name), fn) for f in fields})
    return obj


@dataclass
class LMState:
    """Everything incremental decoding needs, batch-first everywhere.

    layers: one mixer state per block (KVCache for attention, hidden state for RNN/GRU/minGRU, a dict
        for the hybrid's local attention: models/hybrid.py);
    cross: one CrossKV per block (context keys/values computed once), or None entries;
    pos: (B,) long, the position of the next token in each lane (restarts at reset flags);
    copy: what the copy head reads of the context (a copy head), computed once, or None.
    """

    layers: list[Any]
    cross: list[CrossKV | None]
    pos: Tensor
    copy: PointerKeys | None = None

    def detach(self) -> LMState:
        """Cut the graph (truncated BPTT carries the values, not the history)."""
        return map_tensors(self, lambda t: t.detach())

    def index_select(self, index: Tensor) -> LMState:
        """Keep/reorder batch lanes (beam search): a new state whose lane i is old lane index[i]."""
        return map_tensors(self, lambda t: t.index_select(0, index))

    def clone(self) -> LMState:
        """An independent copy (attention caches are updated in place by later calls)."""
        return map_tensors(self, lambda t: t.clone())

    def truncated(self, length: int) -> LMState:
        """The state after only the first `length` tokens, for a model whose every layer is attention.

        An attention state is its key/value cache, and the cache of a prefix is a prefix of the cache, so
        going back costs nothing (a recurrent state cannot be rewound: keep a copy instead). The caches
        returned are views exactly `length` long: the next append copies them into a new buffer, so the
        longer original is never written through them."""
        if not all(isinstance(layer, KVCache) for layer in self.layers):
            raise ValueError("only attention states (key/value caches) can be truncated")
        if not 0 < length <= min(layer.length for layer in self.layers):
            raise ValueError(f"cannot truncate a state to {length} tokens")
        layers = [KVCache(c.k[:, :, :length], c.v[:, :, :length], length) for c in self.layers]
        return LMState(layers, list(self.cross), torch.full_like(self.pos, length), self.copy)


def position_ids(t: int, start: Tensor, reset: Tensor | None) -> Tensor:
    """Positions (B, T) of T new tokens: start (B,) + 0..T-1, restarting at 0 where reset[b, t] is True."""
    steps = torch.arange(t, device=start.device)  # (T,)
    pos = start[:, None] + steps  # (B, T)
    if reset is not None:
        # index of the latest email start at or before each step, -1 when none in this chunk
        last = torch.where(reset, steps, torch.full_like(steps, -1)).cummax(dim=1).values  # (B, T)
        pos = torch.where(last >= 0, steps - last, pos)
    return pos


class LM(nn.Module):
    """A next-token language model: `model(idx, state=None, context=None, reset=None) -> (logits, state)`."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)  # token embedding (V, C)
        self.pos = build_positions(cfg)  # learned / sinusoidal vectors added here; rope / alibi live in attention
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layer))
        self.ctx_encoder = ContextEncoder(cfg) if cfg.reads_context else None  # models/context_encoder.py
        self.ctx_init = (ContextInit(cfg, [i for i, b in enumerate(self.blocks) if _recurrent(b.mixer)])
                         if cfg.context_init else None)
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.copy_head = CopyHead(cfg) if cfg.copies else None  # models/copy.py
        self.reader = reader_for(cfg.context)  # how forward reads a context (models/context_reader.py)
        self._init_weights()
        if cfg.tie_weights:
            self.head.weight = self.wte.weight  # one (V, C) matrix reads tokens in and scores them out

    def _init_weights(self) -> None:
        """GPT-2 init: N(0, 0.02) for embeddings and linear maps, zero biases, and the projections that
        write into the residual stream scaled by 1/sqrt(2 n_layer) (Radford et al. 2019, section 2.3)
        so the residual variance does not grow with depth. Recurrent mixers keep their own init."""
        recurrent = {id(m) for b in self.blocks if not isinstance(b.mixer, MultiHeadAttention)
                     for m in b.mixer.modules()}
        for m in self.modules():
            if id(m) in recurrent:
                continue
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        std = 0.02 / math.sqrt(2 * self.cfg.n_layer)
        for b in self.blocks:
            for attn in (b.mixer, b.xattn):
                if isinstance(attn, MultiHeadAttention):
                    nn.init.normal_(attn.out_proj.weight, mean=0.0, std=std)
            if b.mlp is not None:
                nn.init.normal_(b.mlp.proj.weight, mean=0.0, std=std)

    def num_params(self, non_embedding: bool = False) -> int:
        """Parameter count (a tied matrix counted once); non_embedding drops token and position tables."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= sum(p.numel() for p in self.wte.parameters()) + sum(p.numel() for p in self.pos.parameters())
        return n

    def encode_context(self, context: Tensor | ContextBatch, context_mask: Tensor | None = None
                       ) -> tuple[Tensor, Tensor | None]:
        """Context rows (B, S, C) for cross-attention and the (B, S) or per-query (B, T, S) bool mask of
        what each query may read, from any form `forward` takes (models/context_reader.py `context_in`)."""
        ctx = context_in(self, context, context_mask, None)
        assert ctx is not None
        return ctx.rows, ctx.mask

    def forward(
        self,
        idx: Tensor,
        state: LMState | None = None,
        context: Tensor | ContextBatch | None = None,
        reset: Tensor | None = None,
        context_mask: Tensor | None = None,
    ) -> tuple[Tensor, LMState]:
        """idx (B, T) token ids -> (logits (B, T, vocab_size), state after the last token).

        state: from an earlier call, to continue the same sequences (None starts fresh).
        context: a ContextBatch, (B, Lc) ids or (B, Lc, C) rows, read as `model.context` says (encoded
            once; what the blocks and the copy head read is cached in the state, so later calls may omit
            it; a ContextBatch with a per-position segment must be given with every call). context_mask
            (B, Lc) bool is False on context padding.
        reset: (B, T) bool, True where an email starts: recurrent mixers zero their hidden state and
            additive positions restart at 0 (attention ignores it: its windows lie inside one email).
        """
        t = idx.size(1)
        x, next_pos = self._embed(idx, state, reset)  # (B, T, C), (B,)
        ctx = context_in(self, context, context_mask, t)  # one form, encoded once (or None)
        read = self.reader.read(self, ctx, state, reset, t)  # what the blocks and the head read of it
        layers: list[Any] = []
        crosses: list[CrossKV | None] = []
        for i, block in enumerate(self.blocks):
            layer_state, cross = (state.layers[i], state.cross[i]) if state is not None else (None, None)
            x, layer_state, cross = block(x, layer_state, read.rows, cross, reset, read.mask, read.inits[i])
            layers.append(layer_state)
            crosses.append(cross)
        h = self.ln_f(x)
        logits = linear(h, self.head.weight)  # (B, T, V); oneDNN without autograd (cpu_linear.py)
        logits = self.reader.logits(self, h, logits, read)  # a copy head: log p of its mixture (models/copy.py)
        return logits, LMState(layers, crosses, next_pos, read.ptr)

    def _embed(self, idx: Tensor, state: LMState | None, reset: Tensor | None) -> tuple[Tensor, Tensor]:
        """idx (B, T) -> token embeddings plus additive position vectors, after dropout (B, T, C), and the
        position of the next token in each lane (B,)."""
        b, t = idx.shape
        x = self.wte(idx)  # (B, T) -> (B, T, C)
        if state is None and reset is None:
            # fresh lanes without resets all sit at 0..T-1: one (1, T, C) row of position vectors broadcasts,
            # instead of B gathered copies and a B*T-row scatter-add in the backward pass
            next_pos = torch.full((b,), t, dtype=torch.long, device=idx.device)
            pe = self.pos.embed_first(t, idx.device)
        else:
            start = state.pos if state is not None else torch.zeros(b, dtype=torch.long, device=idx.device)
            positions = position_ids(t, start, reset)  # (B, T)
            next_pos = positions[:, -1] + 1
            pe = self.pos.embed(positions)
        if pe is not None:
            x = x + pe.to(x.dtype)
        return self.drop(x), next_pos


def _recurrent(mixer: nn.Module) -> bool:
    """Whether a block's mixer carries a recurrent state an email may start from (not attention)."""
    return not isinstance(mixer, MultiHeadAttention)


def build_model(cfg: ModelConfig) -> LM:
    """Build the LM of a `ModelConfig` (frozen, so validated once, when it was made)."""
    if not isinstance(cfg, ModelConfig):
        raise ValueError(f"build_model needs a ModelConfig, not {type(cfg).__name__}")
    if cfg.mixer not in MIXERS and cfg.mixer != "hybrid":
        raise ValueError(f"model.mixer={cfg.mixer!r} has no implementation; known: {', '.join(MIXERS)}")
    return LM(cfg)
