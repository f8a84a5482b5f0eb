"""Held-out scoring of a language model: the loss, the bytes each token counts for, and the one loop.

The trainer's validation (`seqlab.training.trainer.Trainer.evaluate`, on a fixed sample of windows) and
the full evaluation of a run (`evaluate_lm`, on every target of a split) both go through
`score_heldout`, so their loss and bits per byte are the same quantity.

Full evaluation scores every target of the split once (not a sample):

- Attention models (and any model with learned positions) see windows of at most `block_size` tokens
  inside one email, overlapping by half (`seqlab.data.batches.iter_eval_windows` with stride
  block_size // 2): each window after an email's first scores only the targets no earlier window
  scored, so every such target is predicted with at least half a window of context, as it would be
  while typing. Side-by-side windows would make the first tokens of every window guess with almost no
  context, a handicap of the evaluation, not of the model. The last window is aligned to the email's end.
- Recurrent models read each email from its first token to its last in chunks of `block_size`, with
  the hidden state carried from chunk to chunk (`seqlab.data.streams.iter_eval_streams`: emails are the
  batch lanes), so a window cut never costs them context; the result does not depend on `block_size`
  or the batch size.

Bits per byte (bpb) = (sum of target NLL in nats / ln 2) / (UTF-8 bytes those targets stand for), the
tokenizer-independent measure of Gao et al. (2020, "The Pile", section 5) and of text compression. The
targets of an email `[bos] + text + [eos]` are `text + [eos]`; a text token counts its own bytes
(`token_bytes`) and eos counts as one byte, a terminator like a newline. Every email therefore counts
len(text.encode()) + 1 bytes whatever the tokenizer, so byte- and BPE-tokenized models divide by the
same number, and the compressors (`seqlab.evaluation.compressors`) read exactly those bytes.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from seqlab.data.batches import IGNORE_INDEX, iter_eval_windows
from seqlab.data.store import TokenStore
from seqlab.data.streams import iter_eval_streams
from seqlab.data.tokenizer import Tokenizer
from seqlab.errors import UserError
from seqlab.generation.decode import context_limit
from seqlab.runs.load import resolve_device

SEPARATOR = b"\n"  # what an email's eos stands for when bytes are counted and compressors read the split

Batch = tuple[bool, torch.Tensor, torch.Tensor]  # (first, x (B, T), y (B, T)): see `score_heldout`


def lm_loss(logits: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Next-token cross-entropy in nats over the targets that are not IGNORE_INDEX.

    logits (B, T, V), y (B, T). `reduction="mean"` (training) averages over the scored targets,
    `"sum"` (held-out scoring) adds them up. Computed in float32 whatever the logits' dtype."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1),
                           ignore_index=IGNORE_INDEX, reduction=reduction)


def token_byte_lengths(tokenizer: Tokenizer) -> torch.Tensor:
    """(V,) int64: bytes each token counts for as a target; eos counts 1, bos and pad count 0.

    Index it with the scored targets of a batch to get their byte count."""
    lengths = torch.tensor([len(tokenizer.token_bytes(i)) for i in range(tokenizer.vocab_size)], dtype=torch.long)
    lengths[tokenizer.eos_id] = len(SEPARATOR)
    lengths[tokenizer.bos_id] = lengths[tokenizer.pad_id] = 0
    return lengths


@dataclass(frozen=True)
class HeldOut:
    """Sums over the scored targets of a held-out pass; the rates are derived from them."""

    nll_nats: float  # summed next-token negative log-likelihood
    tokens: int  # scored targets
    bytes: int  # UTF-8 bytes those targets stand for (`token_byte_lengths`)

    @property
    def loss(self) -> float:
        """Mean loss per target token, in nats (0 when nothing was scored)."""
        return self.nll_nats / max(1, self.tokens)

    @property
    def bpb(self) -> float:
        """Bits per byte: the summed NLL in bits over the bytes of the targets."""
        return self.nll_nats / math.log(2) / max(1, self.bytes)

    @property
    def ppl(self) -> float:
        """Perplexity per token, exp(loss); the exponent is capped below float overflow (~709)."""
        return math.exp(min(self.loss, 700.0))


def score_heldout(model: nn.Module, batches: Iterable[Batch], byte_lengths: torch.Tensor, device: torch.device,
                  autocast: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext) -> HeldOut:
    """Sum the NLL, the scored targets and their bytes over `batches` of (first, x, y).

    x and y are (B, T) int64 with y = IGNORE_INDEX where nothing is scored. The model's returned state
    is passed to the next batch unless `first` is True (independent windows pass True every time).
    `autocast` wraps the forward pass only (the trainer's bf16 on CUDA); the loss is float32. The model
    runs in eval mode and is put back in the mode it was in.
    """
    byte_lengths = byte_lengths.to(device)  # (V,)
    nll, tokens, nbytes, state = 0.0, 0, 0, None
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for first, x, y, *context in batches:  # a 4th element: the batch's contexts (or None)
                x, y = x.to(device), y.to(device)
                extra = {"context": context[0].to(device)} if context and context[0] is not None else {}
                with autocast():
                    logits, state = model(x, state=None if first else state, **extra)  # (B, T, V)
                nll += float(lm_loss(logits, y, reduction="sum"))
                scored = y[y != IGNORE_INDEX]  # (N,) ids of the scored targets
                tokens += int(scored.numel())
                nbytes += int(byte_lengths[scored].sum())
    finally:
        model.train(was_training)
    return HeldOut(nll, tokens, nbytes)


def heldout_batches(model: nn.Module, store: TokenStore, block_size: int, batch_size: int,
                    pad_id: int) -> Iterator[Batch]:
    """Every target of the split once: email lanes for a model that carries state through whole emails,
    windows overlapping by half for one with a bounded context (module docstring)."""
    if context_limit(model) is None:
        return iter_eval_streams(store, block_size, batch_size, pad_id)
    stride = max(1, block_size // 2)
    windows = iter_eval_windows(store, block_size, batch_size, pad_id, stride=stride)
    return ((True, x, y) for x, y in windows)


def evaluate_lm(model: nn.Module, store: TokenStore, block_size: int, batch_size: int,
                device: str | torch.device, tokenizer: Tokenizer) -> dict[str, float | int]:
    """Loss per token (nats), perplexity, bits per byte, target tokens and bytes over the whole split."""
    if store.num_emails == 0 or int((store.lengths - 1).sum()) == 0:
        raise UserError(f"the {store.split} split of {store.data_dir} has no tokens to evaluate.")
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    batches = heldout_batches(model, store, block_size, batch_size, tokenizer.pad_id)
    r = score_heldout(model, batches, token_byte_lengths(tokenizer), dev)
    return {"loss": r.loss, "ppl": r.ppl, "bpb": r.bpb, "tokens": r.tokens, "bytes": r.bytes,
            "nll_nats": r.nll_nats}
