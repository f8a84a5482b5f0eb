"""The token store of a DATA_DIR, read back: `{split}.bin` + `{split}.idx` memory-mapped, checked against meta.json.

On-disk format (ARCHITECTURE.md, "DATA_DIR"):

- `{split}.bin`: every email of the split, one after another, each stored as `[bos] + tokens + [eos]`;
  token ids as little-endian `uint16` when the vocabulary fits (`vocab_size <= 65536`), else `uint32`.
- `{split}.idx`: the start offset (in tokens, into `{split}.bin`) of each email, little-endian `int64`.
  Offsets are strictly increasing, the first is 0; an email ends where the next starts (the last one at
  the end of the file).
- `meta.json`: written by `prepare`; its `token_dtype` field (`"uint16"` / `"uint32"`) says how to read
  `.bin`. Older folders without it fall back on the vocabulary size.

Opening a store checks the files against each other and against what `meta.json` records (when it records
it): `.idx` a whole number of offsets that partition `.bin`, the email and token counts of the split,
every email opening with bos and closing with eos, every id inside the vocabulary. A truncated, damaged
or mismatched file is a `UserError` naming it, never a crash in the middle of training or silent nonsense
(a cut `.idx` would otherwise glue the rest of the split into one email). `check_tokenizer` does the same
for tokenizer.json against meta.json.

Batches are formed from a `TokenStore` in `seqlab.data.batches` (windows, for attention models) and
`seqlab.data.streams` (streams, for recurrent models); `seqlab.data.prepare.token_files` writes the files.
This module needs only numpy, and never imports the mail code or the writers (an import-linter contract).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from seqlab.data.context_store import open_contexts
from seqlab.data.layout import IDX_DTYPE, check_tokenizer, dtype_from_meta, load_meta, meta_field, meta_int, token_dtype
from seqlab.errors import UserError

# The layout's names are part of this module's reading API (`from seqlab.data.store import load_meta`).
__all__ = ["IDX_DTYPE", "TokenStore", "check_tokenizer", "load_meta", "token_dtype"]


class TokenStore:
    """One split of a DATA_DIR, read-only: `tokens` is a memory map, `starts`/`ends` bound each email."""

    def __init__(self, data_dir: Path, split: str) -> None:
        self.data_dir = Path(data_dir)
        self.split = split
        bin_path, idx_path = self.data_dir / f"{split}.bin", self.data_dir / f"{split}.idx"
        for p in (bin_path, idx_path):
            if not p.is_file():
                raise UserError(f"{p} is missing; run `seqlab prepare` to build {self.data_dir}.")
        meta = load_meta(self.data_dir)
        self.dtype = dtype_from_meta(meta, self.data_dir)
        size, idx_size = bin_path.stat().st_size, idx_path.stat().st_size
        if size % self.dtype.itemsize:
            raise UserError(f"{bin_path} is truncated ({size} bytes is not a whole number of {self.dtype} ids).")
        if idx_size % IDX_DTYPE.itemsize:  # np.fromfile would drop the tail without a word
            raise UserError(f"{idx_path} is truncated ({idx_size} bytes is not a whole number of 8-byte offsets).")
        # np.memmap refuses an empty file, and an empty split is legal (a tiny corpus may leave val empty).
        self.tokens: np.ndarray = (np.memmap(bin_path, dtype=self.dtype, mode="r") if size
                                   else np.zeros(0, dtype=self.dtype))
        self.starts: np.ndarray = np.fromfile(idx_path, dtype=IDX_DTYPE).astype(np.int64)
        self.ends: np.ndarray = np.append(self.starts[1:], len(self.tokens)).astype(np.int64)
        self._check(idx_path)
        self._check_against_meta(meta, bin_path, idx_path)
        # `{split}.ctx.bin/.idx`, the replied-to text of each email; None for a DATA_DIR without them
        self.contexts = open_contexts(self.data_dir, split, self.num_emails, meta)

    def _check(self, idx_path: Path) -> None:
        """The offsets must partition the token file into non-empty emails."""
        n, s = len(self.tokens), self.starts
        ok = (len(s) == 0 and n == 0) or (
            len(s) > 0 and s[0] == 0 and s[-1] < n and bool(np.all(np.diff(s) > 0)))
        if not ok:
            raise UserError(f"{idx_path} does not match {self.data_dir / (self.split + '.bin')} (its offsets "
                            "do not cut that file into emails); run `seqlab prepare` again.")

    def _check_against_meta(self, meta: dict[str, Any], bin_path: Path, idx_path: Path) -> None:
        """Counts, email boundaries and ids against what meta.json records (each check only if recorded)."""
        again = "run `seqlab prepare` again"
        counts = meta_field(meta, self.data_dir, "splits", self.split)
        if counts is not None:
            emails, tokens = (meta_int(counts, self.data_dir, f"splits.{self.split}.{key}")
                              for key in ("emails", "tokens"))
            if emails is not None and emails != self.num_emails:
                raise UserError(f"{idx_path} lists {self.num_emails} emails but meta.json records {emails}; {again}.")
            if tokens is not None and tokens != self.num_tokens:
                raise UserError(f"{bin_path} holds {self.num_tokens} tokens but meta.json records {tokens}; {again}.")
        if not self.num_tokens:
            return
        tok = meta_field(meta, self.data_dir, "tokenizer")
        vocab = meta_int(tok, self.data_dir, "tokenizer.vocab_size") if tok is not None else None
        vocab = vocab if vocab is not None else meta_int(meta, self.data_dir, "vocab_size")
        if vocab is not None and int(self.tokens.max()) >= vocab:
            raise UserError(f"{bin_path} holds token ids outside the vocabulary of {vocab}; it is damaged, {again}.")
        for key, at in (("bos_id", self.starts), ("eos_id", self.ends - 1)):
            special = meta_int(tok, self.data_dir, f"tokenizer.{key}") if tok is not None else None
            if special is not None and not bool(np.all(self.tokens[at] == special)):
                raise UserError(f"{bin_path} does not match {idx_path.name}: an email does not "
                                f"{'open with bos' if key == 'bos_id' else 'close with eos'}; {again}.")

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
