"""The contexts of a DATA_DIR: per email, the tokens of the text it replies to (`{split}.ctx.bin/.idx`).

On-disk format (ARCHITECTURE.md, "DATA_DIR"): `{split}.ctx.bin` holds the context token ids of every
email of the split, in the order of `{split}.idx`, with no bos/eos and in the dtype of `{split}.bin`;
`{split}.ctx.idx` the start offset of each email's context (little-endian int64, one per email,
non-decreasing: an email without context has an empty one). `meta.json` records, under `contexts`,
how many emails of each split have a context and from which source:

- `quoted`: the replied-to text quoted in the email itself (`seqlab.data.mail.context.quoted_context`);
- `thread`: the email quotes nothing, and the corpus holds the message its In-Reply-To names: that
  message's cleaned body. The parent is in the same thread (threads are joined through In-Reply-To,
  `corpus.assign_threads`), hence in the same split: a context never carries a test email into training.

Both are cut to `MAX_CONTEXT_CHARS` keeping their end. A DATA_DIR written before contexts existed has no
ctx files; `open_contexts` then gives None and everything trains without context. numpy only, like
`store.py`, so `prepare` does not import torch.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from seqlab.data.durable import StreamFile
from seqlab.data.mail.context import MAX_CONTEXT_CHARS, keep_end
from seqlab.data.mail.corpus import SPLITS
from seqlab.data.mail.spool import iter_spool
from seqlab.data.store import IDX_DTYPE, _dtype_from_meta, token_dtype
from seqlab.data.tokenizer import ByteTokenizer, Tokenizer
from seqlab.errors import UserError

SOURCES = ("quoted", "thread")
_LEN = struct.Struct("<I")
_BUFFER_BYTES = 1 << 20


def ctx_paths(data_dir: Path, split: str) -> tuple[Path, Path]:
    """(`{split}.ctx.bin`, `{split}.ctx.idx`) of a DATA_DIR."""
    return Path(data_dir) / f"{split}.ctx.bin", Path(data_dir) / f"{split}.ctx.idx"


# ---------------------------------------------------------------- the context spool of prepare


class ContextSpool:
    """Each kept email's quoted context (UTF-8, maybe empty), in spool order: u4 length + bytes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._f = StreamFile(self.path, _BUFFER_BYTES)

    def write(self, text: bytes) -> None:
        self._f.write(_LEN.pack(len(text)) + text)

    def close(self) -> None:
        self._f.close()

    def abort(self) -> None:
        self._f.abort()


def iter_context_spool(path: Path) -> Iterator[bytes]:
    with open(path, "rb", buffering=_BUFFER_BYTES) as f:
        while head := f.read(_LEN.size):
            (n,) = _LEN.unpack(head)
            yield f.read(n)


def thread_parents(nodes: np.ndarray, replies: np.ndarray) -> np.ndarray:
    """(N,) int64: the index of the email each email's In-Reply-To names, -1 when the corpus lacks it.

    `nodes` (N,) uint64 digests of each email's node (`Links.node`), `replies` (N,) uint64 digests of its
    In-Reply-To node (0 without one): compact tables, 16 bytes an email, so a large corpus never holds its
    metadata. The first email with a node is the one named (as the thread table counts it)."""
    parents = np.full(len(nodes), -1, dtype=np.int64)
    if not len(nodes):
        return parents
    order = np.argsort(nodes, kind="stable")  # (N,) ties keep corpus order: the first is found first
    ranked = nodes[order]
    at = np.searchsorted(ranked, replies, side="left")  # (N,) the first slot whose node could match
    found = (replies != 0) & (at < len(ranked))
    found[found] = ranked[at[found]] == replies[found]
    parents[found] = order[at[found]]
    parents[parents == np.arange(len(nodes))] = -1  # a message that names itself has no parent
    return parents


# ---------------------------------------------------------------- writing


class ContextWriter:
    """Append one (maybe empty) context per email; `close()` moves both files into place."""

    def __init__(self, data_dir: Path, split: str, vocab_size: int) -> None:
        self.dtype = token_dtype(vocab_size)
        self.paths = ctx_paths(data_dir, split)
        self._tmp = tuple(p.with_name(f".{p.name}.tmp") for p in self.paths)
        self._files = [StreamFile(t, _BUFFER_BYTES, shown=p) for t, p in zip(self._tmp, self.paths)]
        self.num_tokens = 0

    def add(self, ids: np.ndarray) -> None:
        self._files[1].write(np.array([self.num_tokens], dtype=IDX_DTYPE).tobytes())
        self._files[0].write(np.asarray(ids).astype(self.dtype, copy=False).tobytes())
        self.num_tokens += len(ids)

    def close(self) -> None:
        for f in self._files:
            f.close()
        for tmp, path in zip(self._tmp, self.paths):
            os.replace(tmp, path)

    def abort(self) -> None:
        for f, tmp in zip(self._files, self._tmp):
            f.abort()
            tmp.unlink(missing_ok=True)


def _encode(tok: Tokenizer, texts: list[bytes]) -> list[np.ndarray]:
    """Context ids without bos/eos; the byte tokenizer copies the UTF-8 bytes directly."""
    if isinstance(tok, ByteTokenizer):
        return [np.frombuffer(t, dtype=np.uint8) for t in texts]
    return [np.array(ids, dtype=np.int64) for ids in tok.encode_batch([t.decode("utf-8") for t in texts])]


def _body(text: bytes) -> bytes:
    """The body of a spooled training text (`subject\\n\\nbody`), its end kept like a quoted context."""
    body = text.split(b"\n\n", 1)[1] if b"\n\n" in text else text
    return keep_end(body.decode("utf-8"), MAX_CONTEXT_CHARS).encode("utf-8")


def write_contexts(out: Path, tok: Tokenizer, spool: Path, ctx_spool: Path, splits: Sequence[str],
                   parents: np.ndarray) -> dict[str, Any]:
    """Write `{split}.ctx.bin/.idx` for every split; return the `contexts` section of meta.json.

    An email's context is its quoted text, else its parent's body when the corpus holds the parent (the
    parents' bodies are read in one pass over the spool first: only those of emails that quote nothing).
    """
    quoted_len = [len(q) for q in iter_context_spool(ctx_spool)]
    wanted = {int(parents[i]) for i, n in enumerate(quoted_len) if n == 0 and parents[i] >= 0}
    bodies = {i: _body(rec.text) for i, rec in enumerate(iter_spool(spool)) if i in wanted}
    names = list(SPLITS)
    counts = {s: {"quoted": 0, "thread": 0, "none": 0, "tokens": 0} for s in names}
    writers = {}
    try:
        for s in names:
            writers[s] = ContextWriter(out, s, tok.vocab_size)
        batch: list[tuple[str, bytes]] = []
        for i, quoted in enumerate(iter_context_spool(ctx_spool)):
            split, parent = splits[i], int(parents[i])
            if quoted:
                source, text = "quoted", quoted
            elif parent >= 0 and splits[parent] == split:  # always so: a parent shares its reply's thread
                source, text = "thread", bodies[parent]
            else:
                source, text = "none", b""
            counts[split][source] += 1
            batch.append((split, text))
            if len(batch) >= 512:
                _flush(batch, tok, writers, counts)
        _flush(batch, tok, writers, counts)
        for w in writers.values():
            w.close()
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    return {"max_chars": MAX_CONTEXT_CHARS, "sources": list(SOURCES), "splits": counts}


def _flush(batch: list[tuple[str, bytes]], tok: Tokenizer, writers: dict[str, ContextWriter],
           counts: dict[str, dict[str, int]]) -> None:
    for (split, _), ids in zip(batch, _encode(tok, [t for _, t in batch])):
        writers[split].add(ids)
        counts[split]["tokens"] += len(ids)
    batch.clear()


# ---------------------------------------------------------------- reading


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
    dtype = _dtype_from_meta(meta, Path(data_dir))
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
