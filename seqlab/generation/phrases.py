"""A person's own phrases as a cache model blended into the model's next-token distribution.

Gmail Smart Compose personalises a global model by interpolating it with a small n-gram model fitted on
the user's own mail (Chen et al., 2019, section 5.3). Here the n-gram model is over token ids of the
run's own tokenizer (bytes or BPE pieces), so it blends at the token level inside every decoder:

    q(w | h)   = count(c, w) / count(c), with c the longest suffix of the history h, between `min_context`
                 and `max_context` tokens, that the person's mail holds at least `min_count` times;
    lambda(h)  = weight * count(c) / (count(c) + alpha)      (0 when no suffix matches);
    p(w | h)   = (1 - lambda(h)) * p_model(w | h) + lambda(h) * q(w | h)

a cache model (Kuhn & De Mori, 1990) in linear interpolation with the model, trusted more where the
person's context was seen more often. Short contexts are left out on purpose: after one byte the person's
statistics are no better than the model's, and only their recurring phrases ("Kind regards,\nDavid",
"please find attached the") are worth pulling the suggestion toward.

Storage (`RUN_DIR/phrases.npz`, written by `seqlab phrases`): per context length L, three arrays sorted by
a 64-bit hash of the context (`hash_L` uint64, `next_L` int32, `count_L` uint32; one row per context and
next token), and `meta` (a JSON string: tokenizer sha256, context lengths, min_count, emails, tokens).
Contexts are hashed, not stored: two contexts of a length sharing a hash would be merged, which with a
few million contexts happens with probability about 1e-7. Loaded with `allow_pickle=False`.

Used by `complete --phrases`, `eval --phrases` and `serve --phrases` (`blend_from_file`: the server blends
the cache into every suggestion and reports it under /health's "phrases").
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from seqlab.data.tokenizer import Tokenizer
from seqlab.errors import UserError
from seqlab.generation.decode import context_limit
from seqlab.printed_command import printed_command
from seqlab.private_files import private_opener

PHRASES = "phrases.npz"
_MUL = np.uint64(0x9E3779B97F4A7C15)  # an odd 64-bit multiplier (the golden ratio's): a polynomial hash


def _hash_windows(windows: np.ndarray) -> np.ndarray:
    """(N, L) token ids -> (N,) uint64 hashes; the length L seeds the hash (tables are per length anyway)."""
    h = np.full(windows.shape[0], windows.shape[1], dtype=np.uint64)
    for j in range(windows.shape[1]):  # uint64 arithmetic wraps around: a hash mod 2^64
        h = h * _MUL + (windows[:, j].astype(np.uint64) + np.uint64(1))
    return h


class PhraseModel:
    """The n-gram tables of one person's mail (see module doc) and the blend weight used at decode time."""

    def __init__(self, tables: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]], meta: dict[str, Any],
                 weight: float = 0.3, alpha: float = 2.0) -> None:
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"the phrase weight must be in [0, 1], not {weight}")
        self.tables, self.meta, self.weight, self.alpha = tables, meta, weight, alpha
        self.lengths = sorted(tables, reverse=True)  # longest context first

    @classmethod
    def fit(cls, emails: Iterable[np.ndarray], tokenizer: Tokenizer, *, min_context: int = 4,
            max_context: int = 8, min_count: int = 2, **kw: Any) -> PhraseModel:
        """Count the (context, next token) pairs of `emails` (token ids, bos and eos included) for every
        context length in [min_context, max_context]; contexts seen fewer than `min_count` times are dropped."""
        if not 1 <= min_context <= max_context:
            raise ValueError(f"need 1 <= min_context <= max_context, not {min_context}, {max_context}")
        seqs = [np.asarray(e, dtype=np.int64) for e in emails]
        tables = {L: _count(seqs, L, min_count) for L in range(min_context, max_context + 1)}
        meta = {"tokenizer_sha256": tokenizer.sha256(), "min_context": min_context, "max_context": max_context,
                "min_count": min_count, "emails": len(seqs), "tokens": int(sum(len(s) for s in seqs))}
        return cls(tables, meta, **kw)

    def save(self, path: Path | str) -> None:
        arrays = {f"{name}_{L}": a for L, t in self.tables.items() for name, a in zip(("hash", "next", "count"), t)}
        with open(path, "wb", opener=private_opener) as f:  # the person's phrases: 0600
            np.savez_compressed(f, meta=np.array(json.dumps(self.meta, sort_keys=True)), **arrays)

    @classmethod
    def load(cls, path: Path | str, tokenizer: Tokenizer, **kw: Any) -> PhraseModel:
        """The tables in `path`; `UserError` when missing, unreadable or made with another tokenizer."""
        path = Path(path)
        if not path.is_file():
            raise UserError(f"{path} does not exist; fit it with `{printed_command('phrases', path.parent)}`.")
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                tables = {L: (z[f"hash_{L}"], z[f"next_{L}"], z[f"count_{L}"])
                          for L in range(int(meta["min_context"]), int(meta["max_context"]) + 1)}
        except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
            raise UserError(f"{path} is not a readable phrase file ({exc}); fit it again with "
                            f"`seqlab phrases`.") from None
        if meta.get("tokenizer_sha256") != tokenizer.sha256():
            raise UserError(f"{path} was fitted with another tokenizer than the run's; fit it again with "
                            f"`seqlab phrases`.")
        return cls(tables, meta, **kw)

    def matches(self, seq: np.ndarray, first: int) -> list[tuple[int, np.ndarray, np.ndarray, float]]:
        """For every position p >= `first` of `seq` (1-D ids) whose context (ids up to and including p) has a
        matching suffix: (p, next ids, their counts, lambda) of the longest such suffix."""
        found: dict[int, tuple[int, np.ndarray, np.ndarray, float]] = {}
        for L in self.lengths:  # longest first: a position matched at length L is not looked up again
            lo_pos = max(first, L - 1)
            if lo_pos >= len(seq):
                continue
            hashes, nxt, counts = self.tables[L]
            h = _hash_windows(np.lib.stride_tricks.sliding_window_view(seq, L)[lo_pos - L + 1:])  # (P,)
            lo, hi = np.searchsorted(hashes, h, "left"), np.searchsorted(hashes, h, "right")
            for k in np.flatnonzero(hi > lo):
                pos = lo_pos + int(k)
                if pos not in found:
                    c = counts[lo[k]:hi[k]]
                    total = float(c.sum())
                    found[pos] = (pos, nxt[lo[k]:hi[k]], c, self.weight * total / (total + self.alpha))
        return [found[p] for p in sorted(found)]


def _count(seqs: list[np.ndarray], L: int, min_count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hash, next, count) rows of every context of length L followed by a token, sorted by hash then next."""
    windows = [np.lib.stride_tricks.sliding_window_view(s, L + 1) for s in seqs if len(s) > L]
    if not windows:
        return np.zeros(0, np.uint64), np.zeros(0, np.int32), np.zeros(0, np.uint32)
    w = np.concatenate(windows)  # (N, L + 1): a context and the token after it, never across two emails
    h, nxt = _hash_windows(w[:, :L]), w[:, L]
    order = np.lexsort((nxt, h))
    h, nxt = h[order], nxt[order]
    new = np.ones(len(h), dtype=bool)
    new[1:] = (h[1:] != h[:-1]) | (nxt[1:] != nxt[:-1])
    starts = np.flatnonzero(new)
    pair_counts = np.diff(np.append(starts, len(h)))
    h, nxt = h[starts], nxt[starts]
    # total count per context, repeated on each of its rows, to drop rarely seen contexts
    ctx_new = np.ones(len(h), dtype=bool)
    ctx_new[1:] = h[1:] != h[:-1]
    ctx_id = np.cumsum(ctx_new) - 1
    keep = np.bincount(ctx_id, weights=pair_counts)[ctx_id] >= min_count
    return h[keep], nxt[keep].astype(np.int32), pair_counts[keep].astype(np.uint32)


@dataclass
class BlendState:
    """The state of a `PhraseBlend`: the model's own state, and the ids the phrase lookups still need.

    ids (B, n) are the last n of the `seen` tokens fed so far: at least the longest phrase context, and
    for a model with a context limit (attention) all of its window, so that `truncated` can go back to
    any prefix as the server's session encoder does after an edit (`seqlab.serving.sessions`). `clone`
    and `truncated` keep the model state's own contract (attention caches are written in place)."""

    inner: Any
    ids: Tensor
    seen: int
    context: int  # the longest phrase context: the ids a lookup needs before a new token

    def clone(self) -> BlendState:
        inner = self.inner.clone() if hasattr(self.inner, "clone") else self.inner
        return BlendState(inner, self.ids.clone(), self.seen, self.context)

    def truncated(self, length: int) -> BlendState:
        """The state after only the first `length` tokens (ValueError when its ids are no longer kept)."""
        first = self.seen - self.ids.shape[1]  # position of ids[:, 0] in the sequence
        lo = max(0, length - self.context)
        if lo < first or not 0 < length <= self.seen:
            raise ValueError(f"cannot truncate a phrase blend state of {self.seen} tokens to {length}")
        return BlendState(self.inner.truncated(length), self.ids[:, lo - first:length - first], length,
                          self.context)


class PhraseBlend(nn.Module):
    """`model` with `phrases` blended into its next-token distribution; the same model contract.

    Its logits are log p of the blend (a valid input to softmax, sampling and beam search), and its state
    is a `BlendState` (the model's state and the last ids) so that incremental decoding, beam search
    (`select_state` reorders both) and the server's kept sessions see the same history as a full pass.
    """

    def __init__(self, model: nn.Module, phrases: PhraseModel) -> None:
        super().__init__()
        self.model, self.phrases = model, phrases
        self.cfg = getattr(model, "cfg", None)  # `decode.context_limit` reads the model's window from here
        self.longest = self.phrases.lengths[0] if self.phrases.lengths else 0
        # a bounded model keeps its whole window of ids, so its state can be truncated (see BlendState)
        self.keep = max(self.longest, context_limit(self) or 0)

    def forward(self, idx: Tensor, state: BlendState | None = None, **kw: Any) -> tuple[Tensor, BlendState]:
        inner, history, seen = (state.inner, state.ids, state.seen) if state is not None else (None, idx[:, :0], 0)
        logits, inner = self.model(idx, state=inner, **kw)  # (B, T, V)
        full = torch.cat([history.to(idx.device), idx], dim=1).cpu().numpy()  # (B, H + T)
        H, V = history.shape[1], logits.shape[-1]
        blended = logits.float().clone()
        for b in range(full.shape[0]):
            for pos, nxt, counts, lam in self.phrases.matches(full[b], H):
                q = torch.zeros(V, device=logits.device)  # (V,) the person's next-token distribution here
                q[torch.as_tensor(nxt, dtype=torch.long, device=logits.device)] = torch.as_tensor(
                    counts / counts.sum(), dtype=torch.float32, device=logits.device)
                p = torch.softmax(blended[b, pos - H], dim=-1)
                blended[b, pos - H] = torch.log((1 - lam) * p + lam * q)
        T = idx.shape[1]
        kept = torch.as_tensor(full[:, max(0, H + T - self.keep):], device=idx.device)
        return blended, BlendState(inner, kept, seen + T, self.longest)


def blend_from_file(model: nn.Module, tokenizer: Tokenizer, path: Path | str,
                    weight: float = 0.3) -> tuple[PhraseBlend, dict[str, Any]]:
    """`model` blended with the phrase file `path` (`UserError` as `PhraseModel.load`), and a description
    of the phrases for a report such as the server's /health."""
    phrases = PhraseModel.load(path, tokenizer, weight=weight)
    info = {"path": str(path), "weight": weight, "alpha": phrases.alpha,
            **{k: phrases.meta.get(k) for k in ("emails", "tokens", "min_context", "max_context", "min_count",
                                                "data_dir")}}
    return PhraseBlend(model, phrases), info


def unblended(model: nn.Module) -> nn.Module:
    """The model inside a `PhraseBlend` (for probes of its layers, as the server's /v1/why reads), else `model`."""
    return model.model if isinstance(model, PhraseBlend) else model


def fit_phrases(data_dir: Path | str, tokenizer: Tokenizer, **kw: Any) -> PhraseModel:
    """A `PhraseModel` of the train split of DATA_DIR (`PhraseModel.fit` options in `kw`); the DATA_DIR must
    use `tokenizer` (a `UserError` otherwise)."""
    from seqlab.data.store import TokenStore, load_meta

    data_dir = Path(data_dir)
    recorded = load_meta(data_dir).get("tokenizer", {}).get("sha256")
    if recorded != tokenizer.sha256():
        raise UserError(f"{data_dir} was prepared with another tokenizer than the run's; fit phrases on the run's "
                        f"own kind of data (same tokenizer).")
    store = TokenStore(data_dir, "train")
    if store.num_emails == 0:
        raise UserError(f"{data_dir} has no training emails to fit phrases on.")
    model = PhraseModel.fit((store.email(i) for i in range(store.num_emails)), tokenizer, **kw)
    model.meta["data_dir"] = str(data_dir)
    return model
