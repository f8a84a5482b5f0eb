"""The contexts the trainer feeds with each batch when the model reads one (`model.context` other than none).

Each training window or stream chunk gets the contexts of its emails (`seqlab.data.reply_batches`), cut
to `model.ctx_block_size` tokens (their end); validation reads each email's context through
`seqlab.evaluation.heldout.score_split`, as `seqlab eval` does. A model without cross-attention gets None everywhere and
the trainer runs exactly as before. Training a context model on a DATA_DIR without contexts (prepared
before they existed) is a UserError: it would only learn to ignore an always-empty context.
"""

from __future__ import annotations

import dataclasses

import torch

from seqlab.config import RunConfig
from seqlab.data.batches import WindowSampler
from seqlab.data.reply_batches import ContextRows, stream_contexts, window_contexts
from seqlab.data.store import TokenStore
from seqlab.data.streams import StreamSampler
from seqlab.errors import UserError
from seqlab.models.context_encoder import ContextBatch
from seqlab.models.lm import LMState


def as_batch(rows: ContextRows | None, device: torch.device) -> ContextBatch | None:
    """The model's ContextBatch on `device` from a data-side ContextRows (None stays None)."""
    return None if rows is None else ContextBatch(*rows).to(device)


class ContextFeed:
    """Contexts for the training batches of `sampler` (the validation split's are checked to exist)."""

    def __init__(self, cfg: RunConfig, sampler: WindowSampler | StreamSampler, eval_store: TokenStore,
                 device: torch.device) -> None:
        self.on = cfg.model.reads_context
        self.sampler, self.device, self.limit = sampler, device, cfg.model.ctx_block_size
        if not self.on:
            return
        for store in (sampler.store, eval_store):
            if store.contexts is None:
                raise UserError(f"model.context={cfg.model.context} needs the contexts of {store.data_dir} "
                                f"({store.split}.ctx.bin), which was prepared before they existed; run "
                                "`seqlab prepare` again")

    def train(self, index: int) -> ContextBatch | None:
        """The contexts of `sampler.batch(index)`, or None for a model without cross-attention."""
        if not self.on:
            return None
        if isinstance(self.sampler, StreamSampler):
            return as_batch(stream_contexts(self.sampler, index, self.limit), self.device)
        return as_batch(window_contexts(self.sampler.store, self.sampler.window_starts(index), self.limit),
                        self.device)

    def carry(self, state: LMState) -> LMState:
        """The stream state to carry to the next chunk: each chunk brings its own contexts, so the cached
        context keys/values (and the copy head's keys) are dropped (plain tensors only, as a checkpoint
        stores them)."""
        return dataclasses.replace(state, cross=[None] * len(state.cross), copy=None) if self.on else state
