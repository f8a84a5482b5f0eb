"""How an LM reads its context (the message answered): one form of input, and one reader per `model.context`.

`context_in` turns whatever a caller gave (a `ContextBatch`, (B, Lc) token ids with a mask, or (B, Lc, C)
rows encoded already) into one `ContextIn`: the encoder's rows and what each query may read. The LM picks
its reader once, by name (`reader_for(cfg.context)`), and every call asks it for one `ContextRead`:

    none        reads nothing
    cross       the rows, for every block's cross-attention (models/block.py), cached in the state
    init_state  per recurrent block, the state an email starts from (models/context_encoder.py `ContextInit`)
    +copy       a wrapper: the inner reader's read, and the copy head's keys (models/copy.py), whose
                pointer is mixed into the logits; `pointer` is the copy wrapper around `none`

A reader holds nothing itself: the modules it uses (`ctx_encoder`, `ctx_init`, `copy_head`) stay where the
LM's checkpoints keep them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from seqlab.models.context_encoder import ContextBatch, cross_mask
from seqlab.models.copy import PointerKeys


class ReadsContext(Protocol):
    """The parts of an LM the readers use (`seqlab.models.lm.LM`)."""

    wte: nn.Embedding
    blocks: nn.ModuleList
    ctx_encoder: Any
    ctx_init: Any
    copy_head: Any


@dataclass
class ContextIn:
    """One call's context in the one form the readers take.

    rows (B, S, C) encoded; keep (B, S) bool, False on padding; mask: what cross-attention reads, (B, S) or
    per-query (B, T, S) bool, or None (every row); n_ctx: contexts per lane E (S = E * Lc); segment (B, T):
    the context each position reads, or None (context 0); batch: the token ids, None when rows were given.
    """

    rows: Tensor
    keep: Tensor
    mask: Tensor | None
    n_ctx: int
    segment: Tensor | None
    batch: ContextBatch | None


def context_in(lm: ReadsContext, context: Tensor | ContextBatch | None, context_mask: Tensor | None,
               t: int | None) -> ContextIn | None:
    """Any accepted context form -> its `ContextIn` (ids go through the encoder once), or None for none.

    t: the number of query positions, checked against a per-position segment (None: not checked)."""
    if context is None:
        return None
    if lm.ctx_encoder is None:
        raise ValueError("a context was given but model.context is none")
    n_embd = lm.wte.embedding_dim
    if isinstance(context, Tensor) and context.dim() == 3 and context.is_floating_point():
        if lm.copy_head is not None:
            raise ValueError("a model with a copy head copies context tokens: give (B, Lc) token ids or a "
                             f"ContextBatch, not a tensor of shape {tuple(context.shape)}")
        if context.size(-1) != n_embd:
            raise ValueError(f"context rows must be (B, Lc, {n_embd}), got {tuple(context.shape)}")
        keep = (context_mask if context_mask is not None
                else torch.ones(context.shape[:2], dtype=torch.bool, device=context.device))
        return ContextIn(context, keep, context_mask, 1, None, None)
    if isinstance(context, Tensor):
        if context.dim() != 2 or context.is_floating_point():
            raise ValueError(f"context must be (B, Lc) token ids, (B, Lc, {n_embd}) rows or a "
                             f"ContextBatch, got {tuple(context.shape)}")
        context = ContextBatch.single(context, context_mask)
    if context.segment is not None and t is not None and context.segment.size(1) != t:
        raise ValueError(f"context.segment must be (B, {t}), got {tuple(context.segment.shape)}")
    rows, keep, slot = lm.ctx_encoder(lm.wte, context)  # (B, S, C), (B, S), (S,)
    return ContextIn(rows, keep, cross_mask(keep, slot, context.segment), context.ids.size(1), context.segment,
                     context)


@dataclass
class ContextRead:
    """What one call's blocks and head read: cross-attention rows and mask, per-block initial states, and
    the copy head's keys with the mask of what each position may copy (each None where not read)."""

    inits: list[Tensor | None]
    rows: Tensor | None = None
    mask: Tensor | None = None
    ptr: PointerKeys | None = None
    ptr_mask: Tensor | None = None


class NoContext:
    """`none`: no block and no head reads a context."""

    def read(self, lm: ReadsContext, ctx: ContextIn | None, state: Any, reset: Tensor | None,
             t: int) -> ContextRead:
        """ctx: this call's context (None: none given, what the state cached applies); state: the LMState the
        call continues (None: a fresh start); reset (B, T): where an email starts; t: the call's length."""
        return ContextRead([None] * len(lm.blocks))

    def logits(self, lm: ReadsContext, h: Tensor, logits: Tensor, read: ContextRead) -> Tensor:
        """h (B, T, C) after ln_f, the head's logits (B, T, V) -> the model's logits."""
        return logits


class CrossReader(NoContext):
    """`cross`: every block's cross-attention reads the rows (their keys and values cached in the state)."""

    def read(self, lm: ReadsContext, ctx: ContextIn | None, state: Any, reset: Tensor | None,
             t: int) -> ContextRead:
        out = super().read(lm, ctx, state, reset, t)
        return out if ctx is None else replace(out, rows=ctx.rows, mask=ctx.mask)


class InitStateReader(NoContext):
    """`init_state`: each recurrent block starts an email (a reset, or t = 0 of a fresh call) from a state
    projected from the pooled context (`ContextInit`); nothing is read after that."""

    def read(self, lm: ReadsContext, ctx: ContextIn | None, state: Any, reset: Tensor | None,
             t: int) -> ContextRead:
        if ctx is None:
            return super().read(lm, ctx, state, reset, t)
        b = ctx.rows.size(0)
        begin = torch.zeros(b, t, dtype=torch.bool, device=ctx.rows.device) if reset is None else reset.clone()
        if state is None:
            begin[:, 0] = True  # no state given: every lane starts an email here
        return ContextRead(lm.ctx_init(ctx.rows, ctx.keep, ctx.n_ctx, ctx.segment, begin))


class WithCopy(NoContext):
    """`+copy` around another reader: the copy head's keys of the context's tokens (kept in the state for
    later calls), and the logits replaced by the log-probabilities of the pointer-generator mixture."""

    def __init__(self, inner: NoContext) -> None:
        self.inner = inner

    def read(self, lm: ReadsContext, ctx: ContextIn | None, state: Any, reset: Tensor | None,
             t: int) -> ContextRead:
        if ctx is None:  # what an earlier call read, if any
            cached = state.copy if state is not None else None
            out = self.inner.read(lm, ctx, state, reset, t)
            return replace(out, ptr=cached, ptr_mask=None if cached is None else cached.keep)
        assert ctx.batch is not None  # context_in refuses rows for a model with a copy head
        n = lm.copy_head.block_size  # the encoder keeps the last ctx_block_size tokens; so does the pointer
        # the pointer's keys before the inner reader's work: gradients then add up in the same order
        # as ever, so trained weights stay the same to the bit
        ptr = lm.copy_head.keys(ctx.rows, ctx.batch.ids[..., -n:], ctx.batch.keep[..., -n:], lm.wte)
        return replace(self.inner.read(lm, ctx, state, reset, t), ptr=ptr, ptr_mask=ctx.mask)

    def logits(self, lm: ReadsContext, h: Tensor, logits: Tensor, read: ContextRead) -> Tensor:
        if read.ptr is None or read.ptr_mask is None:
            return lm.copy_head.vocab_only(logits)  # no context to copy from: the vocabulary's log p
        return lm.copy_head(h, logits, read.ptr, read.ptr_mask)


READERS: dict[str, type[NoContext]] = {"none": NoContext, "cross": CrossReader, "init_state": InitStateReader}


def reader_for(context: str) -> NoContext:
    """The reader of a `model.context` value: its base reader, wrapped by the copy head for `+copy`."""
    if context == "pointer":
        return WithCopy(NoContext())
    base, _, copy = context.partition("+")
    reader = READERS[base]()
    return WithCopy(reader) if copy == "copy" else reader
