"""Held-out scoring of a language model: the loss, the bytes each token counts for, and the one loop.

The trainer's validation (`seqlab.training.trainer.Trainer.evaluate`, on a fixed sample of whole emails),
the full evaluation of a run (`evaluate_lm`, on every target of a split) and the per-email scores of
`seqlab eval` (`seqlab.evaluation.context_scores.email_scores`) all go through `score_heldout`, one
loop under `torch.inference_mode()`, so their loss and bits per byte are the same quantity.

Full evaluation (`score_split`) scores every target of the split once (not a sample), cut into calls
by `seqlab.evaluation.plans`: recurrent models read whole emails as lanes with the state carried, so a
chunk cut never costs them context; attention with distance-only positions (none, rope, alibi) reads
emails as lanes too, each chunk of W/2 tokens attending to the keys of the W/2 before it, kept in a
sliding key/value cache; attention with learned or sinusoidal positions reads windows overlapping by
half. Every scored target therefore reads at least half a window of its email after the email's first
window, as it would while typing; side-by-side windows would make the first tokens of every window guess
with almost no context, a handicap of the evaluation, not of the model.

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
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from seqlab.data.batches import IGNORE_INDEX
from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import Tokenizer
from seqlab.errors import UserError
from seqlab.evaluation.plans import Chunk, FreshState, plan_kind, slide_chunk, sliding_state, split_plan
from seqlab.generation.decode import context_limit, model_device
from seqlab.models.lm import map_tensors
from seqlab.runs.load import resolve_device

SEPARATOR = b"\n"  # what an email's eos stands for when bytes are counted and compressors read the split
# Rows of block_size positions per held-out call in `seqlab eval` (`evaluation.report.evaluate_run`). Twice a
# `small` training batch: no activations are kept for a backward pass, so a larger call fits, and it scored
# faster than 16 or 64 rows for attention and the GRU (the experiments index has the figures).
EVAL_BATCH = 32

EmailSums = tuple[np.ndarray, np.ndarray, np.ndarray]  # per email of a split: NLL (nats), targets, bytes


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


def row_sums(logits: torch.Tensor, y: torch.Tensor,
             byte_lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row of (B, T): summed NLL in nats (float64), scored targets and their bytes (int64), each (B,)."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # bf16 up to float32, float64 kept
    b, t, v = logits.shape
    # rows of V logits as the head wrote them: (B, V, T) would make the log-softmax copy them transposed
    nll = F.cross_entropy(logits.reshape(b * t, v), y.reshape(b * t), ignore_index=IGNORE_INDEX,
                          reduction="none").view(b, t)  # (B, T)
    scored = y != IGNORE_INDEX
    nbytes = torch.where(scored, byte_lengths[y.clamp(min=0)], 0)  # (B, T)
    return nll.sum(1, dtype=torch.float64), scored.sum(1), nbytes.sum(1)


def carry_lanes(state: Any, lanes: torch.Tensor) -> Any:
    """The state of the lanes `lanes` (B',) only: every tensor in it is batch-first."""
    return map_tensors(state, lambda t: t.index_select(0, lanes.to(t.device)))


def score_heldout(model: nn.Module, batches: Iterable[Chunk | tuple[Any, ...]], byte_lengths: torch.Tensor,
                  device: torch.device, autocast: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
                  fresh: FreshState | None = None, per_email: EmailSums | None = None) -> HeldOut:
    """Sum the NLL, the scored targets and their bytes over `batches`: the one held-out loop.

    Each batch is a `plans.Chunk` or a tuple of its leading fields (first, x, y[, context]), x and y
    (B, T) int64 with y = IGNORE_INDEX where nothing is scored. A chunk with `first` starts from
    `fresh(B, device)` (None by default: the model's own fresh state); any other continues the previous
    call's state (only its `carry` lanes when given). With `per_email` (nll, tokens, bytes arrays over
    the split's emails) each row's sums are also added to its chunk's email. `autocast` wraps the
    forward pass only (bf16 for a run trained in bf16: `seqlab.runs.precision`); the loss is float32.
    The model runs in eval mode under `torch.inference_mode()` and is put back in the mode it was in.
    """
    byte_lengths = byte_lengths.to(device)  # (V,)
    nll, tokens, nbytes, state = 0.0, 0, 0, None
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for batch in batches:
                c = batch if isinstance(batch, Chunk) else Chunk(*batch)
                if c.first:
                    state = fresh(c.x.size(0), device) if fresh is not None else None
                elif c.carry is not None:
                    state = carry_lanes(state, c.carry)
                extra = {"context": c.context.to(device)} if c.context is not None else {}
                with autocast():
                    logits, state = model(c.x.to(device), state=state, **extra)  # (B, T, V)
                sums = row_sums(logits, c.y.to(device), byte_lengths)
                nll += float(sums[0].sum())
                tokens += int(sums[1].sum())
                nbytes += int(sums[2].sum())
                if per_email is not None and c.emails is not None:
                    for field, values in zip(per_email, sums):
                        np.add.at(field, c.emails, values.cpu().numpy())
    finally:
        model.train(was_training)
    return HeldOut(nll, tokens, nbytes)


def context_rows(model: nn.Module, store: TokenStore, use_context: bool = True) -> int:
    """How many context tokens each email gives a model that reads reply contexts (model.ctx_block_size),
    or 0: a model without cross-attention, `use_context=False`, or a DATA_DIR without contexts."""
    cfg = getattr(model, "cfg", None)
    if not use_context or store.contexts is None or not getattr(cfg, "reads_context", False):
        return 0
    return int(cfg.ctx_block_size)


def score_split(model: nn.Module, store: TokenStore, block_size: int, batch_size: int, device: torch.device,
                tokenizer: Tokenizer, use_context: bool = True, per_email: EmailSums | None = None,
                slide: bool = True, emails: np.ndarray | None = None,
                autocast: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext) -> HeldOut:
    """Every target of the split once (of its `emails` only, when given: the trainer's validation
    sample), cut into calls by `plans.split_plan` (lanes, sliding lanes or windows; `slide=False`:
    windows for every attention model); each email's reply context read when the model has
    cross-attention (`context_rows`)."""
    limit = context_rows(model, store, use_context)
    plan = split_plan(model, store, block_size, batch_size, tokenizer.pad_id, limit, slide, emails)
    return score_heldout(model, plan.chunks, token_byte_lengths(tokenizer), device, autocast, fresh=plan.fresh,
                         per_email=per_email)


def evaluate_lm(model: nn.Module, store: TokenStore, block_size: int, batch_size: int,
                device: str | torch.device, tokenizer: Tokenizer, use_context: bool = True,
                autocast: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
                ) -> dict[str, float | int]:
    """Loss per token (nats), perplexity, bits per byte, target tokens and bytes over the whole split
    (`score_split`: a model with cross-attention reads each email's reply context unless `use_context`
    is False; `autocast` wraps the forward passes, as in `score_heldout`)."""
    if store.num_emails == 0 or int((store.lengths - 1).sum()) == 0:
        raise UserError(f"the {store.split} split of {store.data_dir} has no tokens to evaluate.")
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    r = score_split(model, store, block_size, batch_size, dev, tokenizer, use_context, autocast=autocast)
    return {"loss": r.loss, "ppl": r.ppl, "bpb": r.bpb, "tokens": r.tokens, "bytes": r.bytes,
            "nll_nats": r.nll_nats}


def email_logprobs(model: nn.Module, ids: list[int]) -> torch.Tensor:
    """The log-probability (float64, (n,)) of each target of one email `ids` ([bos] + text + [eos], n =
    len(ids) - 1), cut as `split_plan` cuts a split for this model, so that the sum is what `seqlab eval`
    counts: a recurrent model reads it whole; attention with distance-only positions slides in chunks of
    W // 2 with the keys of the W - C inputs before held; other attention reads windows overlapping by half,
    each scoring only the targets no earlier window did (`plans` module docstring)."""
    x = torch.tensor(ids, device=model_device(model))[None]  # (1, n + 1)
    n = x.size(1) - 1
    kind, limit = plan_kind(model), context_limit(model)
    if kind != "windows":
        step = n if kind == "lanes" else slide_chunk(limit)
        state = None if kind == "lanes" else sliding_state(len(model.blocks), limit - step, 1, x.device)
        rows = []
        for a in range(0, n, step):  # each chunk continues the state the one before left
            logits, state = model(x[:, a:min(a + step, n)], state=state)  # (1, T, V)
            rows.append(torch.log_softmax(logits[0].double(), dim=-1))
        lp = torch.cat(rows)  # (n, V)
        return lp[torch.arange(n), x[0, 1:]].cpu()
    logprobs = torch.empty(n, dtype=torch.float64)
    done = 0
    for start in range(0, n, max(1, limit // 2)):
        window = x[0, start: start + limit]
        logits, _ = model(window[None, :-1] if start + limit > n else window[None])  # (1, T, V)
        lp = torch.log_softmax(logits[0].double(), dim=-1)  # (T, V)
        t = torch.arange(done - start, min(lp.size(0), n - start))  # rows whose targets are new
        logprobs[start + t] = lp[t, x[0, start + t + 1]].cpu()
        done = start + int(t[-1]) + 1 if len(t) else done
        if done >= n:
            break
    return logprobs
