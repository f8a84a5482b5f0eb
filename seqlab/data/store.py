"""The token store of a DATA_DIR: write `{split}.bin` + `{split}.idx`, read them back memory-mapped.

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

from seqlab.data.durable import StreamFile
from seqlab.errors import UserError

__all__ = ["IDX_DTYPE", "TokenWriter", "TokenStore", "check_tokenizer", "token_dtype", "load_meta"]

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
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:  # nested too deep
        raise UserError(f"{path} cannot be read as JSON ({exc}); run `seqlab prepare` again.") from None
    if not isinstance(meta, dict):
        raise UserError(f"{path} does not hold a JSON object; run `seqlab prepare` again.")
    return meta


def _meta_field(meta: dict[str, Any], data_dir: Path, *keys: str) -> dict[str, Any] | None:
    """meta[keys[0]][keys[1]]... when recorded (None if absent); a UserError if it is not a JSON object."""
    node: Any = meta
    for i, key in enumerate(keys):
        if key not in node:
            return None
        node = node[key]
        if not isinstance(node, dict):
            raise UserError(f"{data_dir / 'meta.json'} records {'.'.join(keys[:i + 1])} as a "
                            f"{type(node).__name__}, not an object; run `seqlab prepare` again.")
    return node


def _meta_int(node: dict[str, Any], data_dir: Path, name: str) -> int | None:
    """The integer at the last part of the dotted `name` in `node`, None if absent; UserError if not an int."""
    value = node.get(name.rsplit(".", 1)[-1])
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise UserError(f"{data_dir / 'meta.json'} records {name} as {value!r}, not a count; "
                        "run `seqlab prepare` again.")
    return value


def check_tokenizer(data_dir: Path, meta: dict[str, Any], vocab_size: int, sha256: str) -> None:
    """tokenizer.json must be the one prepare recorded in meta.json (vocabulary size and sha256), else
    its ids would not mean the ids in the token files: a UserError naming the file."""
    tok = _meta_field(meta, Path(data_dir), "tokenizer")
    if tok is None:
        return  # a hand-made folder that records no tokenizer: nothing to compare with
    path = Path(data_dir) / "tokenizer.json"
    recorded = _meta_int(tok, Path(data_dir), "tokenizer.vocab_size")
    if recorded is not None and recorded != vocab_size:
        raise UserError(f"{path} has {vocab_size} ids but meta.json records {recorded}; it is not the "
                        "tokenizer this data was prepared with.")
    if "sha256" in tok and tok["sha256"] != sha256:
        raise UserError(f"{path} is not the tokenizer this data was prepared with (its sha256 differs from "
                        "the one in meta.json).")


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
        # through os.write (seqlab.data.durable): a full disk is a DiskFullError naming the file
        self._bin = StreamFile(self._bin_tmp, _BUFFER_BYTES, shown=self.bin_path)
        try:
            self._idx = StreamFile(self._idx_tmp, _BUFFER_BYTES, shown=self.idx_path)
        except BaseException:
            self._bin.abort()
            self._bin_tmp.unlink(missing_ok=True)
            raise
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

    def add_flat(self, flat: np.ndarray, lengths: np.ndarray) -> None:
        """Append several emails at once: `flat` (N,) their token ids end to end (bos and eos included),
        `lengths` (E,) each email's count. The files get the same bytes as `add` of each email in turn."""
        if self.closed:
            raise ValueError(f"TokenWriter for {self.split} is already closed")
        if flat.ndim != 1 or flat.dtype.kind not in "iu" or int(lengths.sum()) != flat.size or (lengths <= 0).any():
            raise ValueError("add_flat needs 1-D integer ids and positive lengths that sum to their count")
        if flat.size == 0:
            return
        lo, hi = int(flat.min()), int(flat.max())
        if lo < 0 or hi >= self.vocab_size:
            raise ValueError(f"token id out of range [0, {self.vocab_size}): min {lo}, max {hi}")
        starts = np.cumsum(lengths, dtype=IDX_DTYPE) - lengths + self.num_tokens  # (E,) each email's offset
        self._bin.write(flat.astype(self.dtype, copy=False).tobytes())
        self._idx.write(starts.astype(IDX_DTYPE, copy=False).tobytes())
        self.num_tokens += int(flat.size)
        self.num_emails += len(lengths)

    def close(self) -> None:
        """Flush, fsync and move both files into place (idempotent)."""
        if self.closed:
            return
        try:
            for f in (self._bin, self._idx):
                f.close()
        except BaseException:
            self.abort()  # a full disk at the last flush: nothing half-written may take the real names
            raise
        self.closed = True
        os.replace(self._bin_tmp, self.bin_path)
        os.replace(self._idx_tmp, self.idx_path)

    def abort(self) -> None:
        """Discard everything written so far; an existing store of this split is left as it was."""
        if self.closed:
            return
        self.closed = True
        for f in (self._bin, self._idx):
            f.abort()
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
        meta = load_meta(self.data_dir)
        self.dtype = _dtype_from_meta(meta, self.data_dir)
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
        from seqlab.data.contexts import open_contexts  # imported here: contexts.py builds on this module

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
        counts = _meta_field(meta, self.data_dir, "splits", self.split)
        if counts is not None:
            emails, tokens = (_meta_int(counts, self.data_dir, f"splits.{self.split}.{key}")
                              for key in ("emails", "tokens"))
            if emails is not None and emails != self.num_emails:
                raise UserError(f"{idx_path} lists {self.num_emails} emails but meta.json records {emails}; {again}.")
            if tokens is not None and tokens != self.num_tokens:
                raise UserError(f"{bin_path} holds {self.num_tokens} tokens but meta.json records {tokens}; {again}.")
        if not self.num_tokens:
            return
        tok = _meta_field(meta, self.data_dir, "tokenizer")
        vocab = _meta_int(tok, self.data_dir, "tokenizer.vocab_size") if tok is not None else None
        vocab = vocab if vocab is not None else _meta_int(meta, self.data_dir, "vocab_size")
        if vocab is not None and int(self.tokens.max()) >= vocab:
            raise UserError(f"{bin_path} holds token ids outside the vocabulary of {vocab}; it is damaged, {again}.")
        for key, at in (("bos_id", self.starts), ("eos_id", self.ends - 1)):
            special = _meta_int(tok, self.data_dir, f"tokenizer.{key}") if tok is not None else None
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
