"""Held-out scores per email, so that emails with a context and emails without one are reported apart.

`email_scores` scores every target of a split exactly once through the loop `heldout.evaluate_lm` uses
(`heldout.score_split`, cut into calls by `seqlab.evaluation.plans`), and adds each row's NLL and bytes
to the email it belongs to; a model with a `model.context` reads each email's context
(`seqlab.data.reply_batches`). `by_context` sums them over the emails that have a
context and those that do not. `paired_bootstrap` gives an interval for the difference in bits per
byte between two models scored on the same emails (Efron & Tibshirani 1993, ch. 6: resample emails,
not tokens, since the tokens of one email are not independent).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import Tokenizer
from seqlab.evaluation.bootstrap import draws, interval, ratios
from seqlab.evaluation.heldout import score_split


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


def email_scores(model: nn.Module, store: TokenStore, block_size: int, batch_size: int, device: torch.device,
                 tokenizer: Tokenizer, use_context: bool = True,
                 autocast: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext) -> EmailScores:
    """Score every target of the split once, per email (module docstring). `use_context=False` scores a
    context model without its contexts (what it does on mail that answers nothing); `autocast` wraps the
    forward passes (`heldout.score_heldout`)."""
    n = store.num_emails
    out = EmailScores(np.zeros(n), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64),
                      store.contexts.lengths > 0 if store.contexts is not None else np.zeros(n, dtype=bool))
    score_split(model, store, block_size, batch_size, device, tokenizer, use_context,
                per_email=(out.nll, out.tokens, out.bytes), autocast=autocast)
    return out


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
    pick = idx[draws(len(idx), samples, seed)]  # (S, N) resampled emails
    diff = ratios(a.nll - b.nll, a.bytes, pick, 1 / math.log(2))  # (S,) bits per byte
    lo, hi = interval(diff, level) or (math.nan, math.nan)
    return {"diff": a.bpb(idx) - b.bpb(idx), "low": float(lo), "high": float(hi), "emails": int(len(idx)),
            "level": level}
