"""The token store of a DATA_DIR: write `{split}.bin` + `{split}.idx`, read them back memory-mapped.

On-disk format (ARCHITECTURE.md, "DATA_DIR"):

- `{split}.bin`: every email of the split, one after another, each stored as `[bos] + tokens + [eos]`;
  token ids as little-endian `uint16` when the vocabulary fits (`vocab_size <= 65536`), else `uint32`.
- `{split}.idx`: the start offset (in tokens, into `{split}.bin`) of each email, little-endian `int64`.
  Offsets are strictly increasing, the first is 0; an email ends where the next starts (the last one at
  the end of the file).
- `meta.json`: written by `prepare`; its `token_dtype` field (`"uint16"` / `"uint32"`) says how to read
  `.bin`. Older folders without it fall back on the vocabulary size.

Batches are formed from a `TokenStore` in `seqlab.data.batches` (windows, for attention models) and
`seqlab.data.streams` (streams, for recurrent models). This module needs only numpy, so `prepare`, which
only writes tokens, does not pay torch's import time and memory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from seqlab.errors import UserError

__all__ = ["IDX_DTYPE", "TokenWriter", "TokenStore", "token_dtype", "load_meta"]

IDX_DTYPE = np.dtype("<i8")  # email start offsets in `{split}.idx`
_BUFFER_BYTES = 1 << 20  # write buffer of a TokenWriter: memory stays bounded whatever the corpus size


def token_dtype(vocab_size: int) -> np.dtype:
    """The on-disk dtype of token ids: little-endian uint16 when every id fits in 16 bits, else uint32."""
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be at least 1, not {vocab_size}")
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


def load_meta(data_dir: Path) -> dict[str, Any]:
    """Read `data_dir/meta.json`; a missing or unreadable file is a UserError."""
    path = Path(data_dir) / "meta.json"
    if not path.is_file():
        raise UserError(f"{data_dir} is not a prepared data folder (no meta.json); run `seqlab prepare` first.")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path} cannot be read as JSON ({exc}); run `seqlab prepare` again.") from None
    if not isinstance(meta, dict):
        raise UserError(f"{path} does not hold a JSON object; run `seqlab prepare` again.")
    return meta


def _dtype_from_meta(meta: dict[str, Any], data_dir: Path) -> np.dtype:
    """`token_dtype` when present, else derived from the vocabulary size recorded by prepare."""
    name = meta.get("token_dtype")
    if name is not None:
        if name not in ("uint16", "uint32"):
            raise UserError(f"{data_dir}/meta.json names token_dtype {name!r}; expected uint16 or uint32.")
        return np.dtype(name).newbyteorder("<")
    tok = meta.get("tokenizer")
    vocab = meta.get("vocab_size", tok.get("vocab_size") if isinstance(tok, dict) else None)
    if not isinstance(vocab, int) or vocab < 1:
        raise UserError(f"{data_dir}/meta.json records neither token_dtype nor a vocabulary size.")
    return token_dtype(vocab)


class TokenWriter:
    """Append emails to `{split}.bin` through a buffered file; `close()` writes `{split}.idx` and commits.

    Both files are written under temporary names and moved into place with `os.replace` on a clean
    close, so a reader never sees a half-written store. Leaving a `with` block by an exception (or
    calling `abort()`) removes the temporary files and leaves any previous store untouched. Only the
    start offsets (8 bytes per email) are kept in memory, never the tokens.
    """

    def __init__(self, data_dir: Path, split: str, vocab_size: int) -> None:
        self.data_dir = Path(data_dir)
        self.split = split
        self.vocab_size = vocab_size
        self.dtype = token_dtype(vocab_size)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.bin_path = self.data_dir / f"{split}.bin"
        self.idx_path = self.data_dir / f"{split}.idx"
        self._bin_tmp = self.data_dir / f".{split}.bin.tmp"
        self._idx_tmp = self.data_dir / f".{split}.idx.tmp"
        self._bin = open(self._bin_tmp, "wb", buffering=_BUFFER_BYTES)  # noqa: SIM115 - closed in close()
        self._idx = open(self._idx_tmp, "wb", buffering=_BUFFER_BYTES)  # noqa: SIM115
        self.num_tokens = 0
        self.num_emails = 0
        self.closed = False

    def add(self, ids: Sequence[int] | np.ndarray) -> int:
        """Append one email's token ids (bos and eos included by the caller); return its start offset."""
        if self.closed:
            raise ValueError(f"TokenWriter for {self.split} is already closed")
        arr = np.asarray(ids)
        if arr.ndim != 1 or arr.size == 0:
            raise ValueError(f"an email must be a non-empty 1-D sequence of token ids, got shape {arr.shape}")
        if arr.dtype.kind not in "iu":
            raise ValueError(f"token ids must be integers, got dtype {arr.dtype}")
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= self.vocab_size:
            raise ValueError(f"token id out of range [0, {self.vocab_size}): min {lo}, max {hi}")
        start = self.num_tokens
        self._bin.write(arr.astype(self.dtype, copy=False).tobytes())
        self._idx.write(np.array([start], dtype=IDX_DTYPE).tobytes())
        self.num_tokens += int(arr.size)
        self.num_emails += 1
        return start

    def close(self) -> None:
        """Flush, fsync and move both files into place (idempotent)."""
        if self.closed:
            return
        self.closed = True
        for f in (self._bin, self._idx):
            f.flush()
            os.fsync(f.fileno())
            f.close()
        os.replace(self._bin_tmp, self.bin_path)
        os.replace(self._idx_tmp, self.idx_path)

    def abort(self) -> None:
        """Discard everything written so far; an existing store of this split is left as it was."""
        if self.closed:
            return
        self.closed = True
        for f in (self._bin, self._idx):
            f.close()
        for p in (self._bin_tmp, self._idx_tmp):
            p.unlink(missing_ok=True)

    def __enter__(self) -> TokenWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class TokenStore:
    """One split of a DATA_DIR, read-only: `tokens` is a memory map, `starts`/`ends` bound each email."""

    def __init__(self, data_dir: Path, split: str) -> None:
        self.data_dir = Path(data_dir)
        self.split = split
        bin_path, idx_path = self.data_dir / f"{split}.bin", self.data_dir / f"{split}.idx"
        for p in (bin_path, idx_path):
            if not p.is_file():
                raise UserError(f"{p} is missing; run `seqlab prepare` to build {self.data_dir}.")
        self.dtype = _dtype_from_meta(load_meta(self.data_dir), self.data_dir)
        size = bin_path.stat().st_size
        if size % self.dtype.itemsize:
            raise UserError(f"{bin_path} is truncated ({size} bytes is not a whole number of {self.dtype} ids).")
        # np.memmap refuses an empty file, and an empty split is legal (a tiny corpus may leave val empty).
        self.tokens: np.ndarray = (np.memmap(bin_path, dtype=self.dtype, mode="r") if size
                                   else np.zeros(0, dtype=self.dtype))
        self.starts: np.ndarray = np.fromfile(idx_path, dtype=IDX_DTYPE).astype(np.int64)
        self.ends: np.ndarray = np.append(self.starts[1:], len(self.tokens)).astype(np.int64)
        self._check(idx_path)

    def _check(self, idx_path: Path) -> None:
        """The offsets must partition the token file into non-empty emails."""
        n, s = len(self.tokens), self.starts
        ok = (len(s) == 0 and n == 0) or (
            len(s) > 0 and s[0] == 0 and s[-1] < n and bool(np.all(np.diff(s) > 0)))
        if not ok:
            raise UserError(f"{idx_path} does not match {self.split}.bin; run `seqlab prepare` again.")

    @property
    def num_emails(self) -> int:
        return len(self.starts)

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per email (int64, bos and eos included)."""
        return self.ends - self.starts

    def email(self, i: int) -> np.ndarray:
        """The token ids of email `i` (a view into the memory map)."""
        if not -self.num_emails <= i < self.num_emails:
            raise IndexError(f"email {i} out of range for {self.num_emails} emails in {self.split}")
        i %= self.num_emails
        return self.tokens[self.starts[i]:self.ends[i]]

    def __len__(self) -> int:
        return self.num_emails
