"""The contexts of a DATA_DIR, read back: per email, the tokens of the text it replies to (`{split}.ctx.bin/.idx`).

On-disk format (ARCHITECTURE.md, "DATA_DIR"): `{split}.ctx.bin` holds the context token ids of every
email of the split, in the order of `{split}.idx`, with no bos/eos and in the dtype of `{split}.bin`;
`{split}.ctx.idx` the start offset of each email's context (little-endian int64, one per email,
non-decreasing: an email without context has an empty one). `meta.json` records, under `contexts`,
how many emails of each split have a context and from which source (`CONTEXT_SOURCES`):

- `quoted`: the replied-to text quoted in the email itself;
- `thread`: the email quotes nothing, and the corpus holds the message its In-Reply-To names: that
  message's cleaned body. The parent is in the same thread, hence in the same split: a context never
  carries a test email into training.

`seqlab.data.prepare.reply_files` writes them. A DATA_DIR written before contexts existed has no ctx
files; `open_contexts` then gives None and everything trains without context. numpy only, like
`store.py`, so reading a DATA_DIR does not import torch or the mail code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from seqlab.data.layout import IDX_DTYPE, dtype_from_meta
from seqlab.errors import UserError

__all__ = ["CONTEXT_SOURCES", "ContextStore", "ctx_paths", "open_contexts"]

CONTEXT_SOURCES = ("quoted", "thread")


def ctx_paths(data_dir: Path, split: str) -> tuple[Path, Path]:
    """(`{split}.ctx.bin`, `{split}.ctx.idx`) of a DATA_DIR."""
    return Path(data_dir) / f"{split}.ctx.bin", Path(data_dir) / f"{split}.ctx.idx"


class ContextStore:
    """The contexts of one split, read-only: `context(i)` the ids of email i's context (maybe empty)."""

    def __init__(self, tokens: np.ndarray, starts: np.ndarray) -> None:
        self.tokens = tokens
        self.starts = starts
        self.ends = np.append(starts[1:], len(tokens)).astype(np.int64)

    @property
    def lengths(self) -> np.ndarray:
        return self.ends - self.starts

    def context(self, i: int, limit: int | None = None) -> np.ndarray:
        """Email i's context ids; with `limit`, only its last `limit` tokens (the end is kept)."""
        lo, hi = int(self.starts[i]), int(self.ends[i])
        if limit is not None:
            lo = max(lo, hi - limit)
        return np.asarray(self.tokens[lo:hi])


def open_contexts(data_dir: Path, split: str, num_emails: int, meta: dict[str, Any]) -> ContextStore | None:
    """The split's contexts, or None when the DATA_DIR has none (written before contexts existed).

    A ctx file pair that does not match its split (entries, order of offsets, the token count meta.json
    records) is a UserError naming the file."""
    bin_path, idx_path = ctx_paths(data_dir, split)
    if not bin_path.is_file() and not idx_path.is_file():
        return None
    again = "run `seqlab prepare` again"
    for p in (bin_path, idx_path):
        if not p.is_file():
            raise UserError(f"{p} is missing while its pair exists; {again}.")
    dtype = dtype_from_meta(meta, Path(data_dir))
    size = bin_path.stat().st_size
    if size % dtype.itemsize or idx_path.stat().st_size != num_emails * IDX_DTYPE.itemsize:
        raise UserError(f"{idx_path} does not hold one context per email of {split}.idx; {again}.")
    tokens = np.memmap(bin_path, dtype=dtype, mode="r") if size else np.zeros(0, dtype=dtype)
    starts = np.fromfile(idx_path, dtype=IDX_DTYPE).astype(np.int64)
    ok = len(starts) == 0 or (starts[0] == 0 and starts[-1] <= len(tokens) and bool(np.all(np.diff(starts) >= 0)))
    recorded = meta.get("contexts", {}).get("splits", {}).get(split, {}).get("tokens")
    if not ok or (recorded is not None and recorded != len(tokens)):
        raise UserError(f"{idx_path} does not match {bin_path.name}; {again}.")
    return ContextStore(tokens, starts)
