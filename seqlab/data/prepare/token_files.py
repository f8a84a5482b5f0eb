"""The token files of a DATA_DIR, written: `TokenWriter` appends emails to `{split}.bin` and their start
offsets to `{split}.idx` (the layout: `seqlab.data.layout`; read back by `seqlab.data.store.TokenStore`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import numpy as np

from seqlab.data.layout import IDX_DTYPE, token_dtype
from seqlab.durable import StreamFile
from seqlab.private_files import make_private_dirs

__all__ = ["TokenWriter", "copy_into"]

_BUFFER_BYTES = 1 << 20  # write buffer of a TokenWriter: memory stays bounded whatever the corpus size


def copy_into(stream: StreamFile, path: Path) -> int:
    """Append the bytes of the file at `path` to `stream`, a block at a time; return how many."""
    total = 0
    with open(path, "rb") as f:
        while block := f.read(_BUFFER_BYTES):
            stream.write(block)
            total += len(block)
    return total


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
        make_private_dirs(self.data_dir)
        self.bin_path = self.data_dir / f"{split}.bin"
        self.idx_path = self.data_dir / f"{split}.idx"
        self._bin_tmp = self.data_dir / f".{split}.bin.tmp"
        self._idx_tmp = self.data_dir / f".{split}.idx.tmp"
        # through os.write (seqlab.durable): a full disk is a DiskFullError naming the file
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

    def keep(self, bin_path: Path, idx_path: Path) -> None:
        """Start with an earlier store's emails, their bytes as they are (`prepare --update`); new ones follow."""
        if self.num_emails or self.closed:
            raise ValueError(f"TokenWriter for {self.split} can keep an earlier store only before any email")
        self.num_tokens = copy_into(self._bin, bin_path) // self.dtype.itemsize
        self.num_emails = copy_into(self._idx, idx_path) // IDX_DTYPE.itemsize

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
