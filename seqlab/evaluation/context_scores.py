"""Held-out scores per email, so that emails with a context and emails without one are reported apart.

`email_scores` scores every target of a split exactly once, as `heldout.evaluate_lm` does (windows
overlapping by half for a model with a bounded context, whole-email lanes for a recurrent one), and
adds each row's NLL and bytes to the email it belongs to; a model with `model.cross_attention` reads
each email's context (`seqlab.data.context_batches`). `by_context` sums them over the emails that have a
context and those that do not. `paired_bootstrap` gives an interval for the difference in bits per
byte between two models scored on the same emails (Efron & Tibshirani 1993, ch. 6: resample emails,
not tokens, since the tokens of one email are not independent).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from seqlab.data.batches import IGNORE_INDEX, _eval_windows, gather_windows
from seqlab.data.context_batches import gather_contexts, window_contexts
from seqlab.data.store import TokenStore
from seqlab.data.streams import iter_eval_streams
from seqlab.data.tokenizer import Tokenizer
from seqlab.evaluation.heldout import token_byte_lengths
from seqlab.generation.decode import context_limit
from seqlab.models.context import ContextBatch


@dataclass
class EmailScores:
    """Per email of a split: summed NLL (nats), scored targets and the bytes they stand for; has_context."""

    nll: np.ndarray
    tokens: np.ndarray
    bytes: np.ndarray
    has_context: np.ndarray

    def bpb(self, emails: np.ndarray | None = None) -> float:
        """Bits per byte over `emails` (a bool mask or indices; all by default)."""
        sel = slice(None) if emails is None else emails
        return float(self.nll[sel].sum() / math.log(2) / max(1, int(self.bytes[sel].sum())))


def _row_sums(logits: torch.Tensor, y: torch.Tensor, byte_lengths: torch.Tensor) -> tuple[np.ndarray, ...]:
    """Per row of (B, T): summed NLL (nats), scored targets, their bytes."""
    nll = F.cross_entropy(logits.float().transpose(1, 2), y, ignore_index=IGNORE_INDEX, reduction="none")  # (B, T)
    scored = y != IGNORE_INDEX
    nbytes = torch.where(scored, byte_lengths[y.clamp(min=0)], 0)
    return (nll.sum(1).double().cpu().numpy(), scored.sum(1).cpu().numpy(), nbytes.sum(1).cpu().numpy())


def email_scores(model: nn.Module, store: TokenStore, block_size: int, batch_size: int, device: torch.device,
                 tokenizer: Tokenizer, use_context: bool = True) -> EmailScores:
    """Score every target of the split once, per email (module docstring). `use_context=False` scores a
    context model without its contexts (what it does on mail that answers nothing)."""
    n = store.num_emails
    out = EmailScores(np.zeros(n), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64),
                      store.contexts.lengths > 0 if store.contexts is not None else np.zeros(n, dtype=bool))
    reads = bool(getattr(getattr(model, "cfg", None), "cross_attention", False)) and use_context
    if reads and store.contexts is None:
        reads = False  # an old DATA_DIR: nothing to read
    limit = model.cfg.ctx_block_size if reads else 0
    byte_lengths = token_byte_lengths(tokenizer).to(device)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            if context_limit(model) is None:
                _score_streams(model, store, block_size, batch_size, device, tokenizer, out, byte_lengths, limit)
            else:
                _score_windows(model, store, block_size, batch_size, device, tokenizer, out, byte_lengths, limit)
    finally:
        model.train(was_training)
    return out


def _add(out: EmailScores, emails: np.ndarray, sums: tuple[np.ndarray, ...]) -> None:
    for field, values in zip((out.nll, out.tokens, out.bytes), sums):
        np.add.at(field, emails, values)


def _score_windows(model: nn.Module, store: TokenStore, block_size: int, batch_size: int, device: torch.device,
                   tok: Tokenizer, out: EmailScores, byte_lengths: torch.Tensor, limit: int) -> None:
    start, length, skip = _eval_windows(store, block_size, max(1, block_size // 2))
    email = np.searchsorted(store.starts, start, side="right") - 1  # (W,) email of each window
    for a in range(0, len(start), batch_size):
        sl = slice(a, a + batch_size)
        x, y = gather_windows(store.tokens, start[sl], length[sl], block_size, tok.pad_id, skip[sl])
        extra = {}
        if limit:
            extra["context"] = ContextBatch(*window_contexts(store, start[sl], limit)).to(device)
        logits, _ = model(x.to(device), **extra)
        _add(out, email[sl], _row_sums(logits, y.to(device), byte_lengths))


def _score_streams(model: nn.Module, store: TokenStore, block_size: int, batch_size: int, device: torch.device,
                   tok: Tokenizer, out: EmailScores, byte_lengths: torch.Tensor, limit: int) -> None:
    order = np.argsort(store.lengths, kind="stable")  # the lanes of iter_eval_streams, batch by batch
    batch, state, emails = -1, None, order[:0]
    for first, x, y in iter_eval_streams(store, block_size, batch_size, tok.pad_id):
        extra = {}
        if first:
            batch += 1
            emails, state = order[batch * batch_size:(batch + 1) * batch_size], None
            if limit:  # given once per email: its keys and values stay in the state
                assert store.contexts is not None
                ids, keep = gather_contexts(store.contexts, emails[:, None], limit)
                extra["context"] = ContextBatch(ids, keep).to(device)
        logits, state = model(x.to(device), state=state, **extra)
        _add(out, emails, _row_sums(logits, y.to(device), byte_lengths))


def totals(scores: EmailScores) -> dict[str, float | int]:
    """Loss per token (nats), perplexity, bits per byte, tokens, bytes and NLL over the whole split: the
    numbers of `heldout.evaluate_lm`, from the per-email sums."""
    nll, tokens = float(scores.nll.sum()), int(scores.tokens.sum())
    loss = nll / max(1, tokens)
    return {"loss": loss, "ppl": math.exp(min(loss, 700.0)), "bpb": scores.bpb(), "tokens": tokens,
            "bytes": int(scores.bytes.sum()), "nll_nats": nll}


def by_context(scores: EmailScores) -> dict[str, dict[str, float | int]]:
    """Bits per byte, emails and bytes over the emails with a context and over those without."""
    groups = {"with_context": scores.has_context, "without_context": ~scores.has_context}
    return {name: {"bpb": scores.bpb(sel), "emails": int(sel.sum()), "bytes": int(scores.bytes[sel].sum())}
            for name, sel in groups.items()}


def paired_bootstrap(a: EmailScores, b: EmailScores, emails: np.ndarray | None = None, samples: int = 2000,
                     seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """bpb(a) - bpb(b) over the same emails, with a percentile interval from resampling emails."""
    idx = np.arange(len(a.nll)) if emails is None else np.flatnonzero(emails) if emails.dtype == bool else emails
    rng = np.random.default_rng([seed])
    draws = rng.integers(0, len(idx), size=(samples, len(idx)))  # (S, N) resampled emails
    pick = idx[draws]
    nbytes = a.bytes[pick].sum(1)
    diff = (a.nll[pick].sum(1) - b.nll[pick].sum(1)) / math.log(2) / np.maximum(nbytes, 1)  # (S,)
    lo, hi = np.quantile(diff, [(1 - level) / 2, (1 + level) / 2])
    return {"diff": a.bpb(idx) - b.bpb(idx), "low": float(lo), "high": float(hi), "emails": int(len(idx)),
            "level": level}
