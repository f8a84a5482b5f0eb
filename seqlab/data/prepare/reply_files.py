"""The contexts of a DATA_DIR, written: `{split}.ctx.bin/.idx` (the layout: `seqlab.data.context_store`).

An email's context is the replied-to text quoted in it (`seqlab.data.mail.quoted`, parked in the context
spool while mail is read); when it quotes nothing and the corpus holds the message its In-Reply-To names
(`thread_parents`), that message's cleaned body. A parent shares its reply's thread (threads are joined
through In-Reply-To, `threadtable.py`), hence its split. Both are cut to `MAX_CONTEXT_CHARS`, their end kept.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from seqlab.data.context_store import CONTEXT_SOURCES, ctx_paths
from seqlab.data.layout import IDX_DTYPE, SPLITS, token_dtype
from seqlab.data.mail.quoted import MAX_CONTEXT_CHARS, keep_end
from seqlab.data.prepare.spool import iter_context_spool, iter_spool
from seqlab.data.prepare.token_files import copy_into
from seqlab.data.tokenizer import ByteTokenizer, Tokenizer
from seqlab.durable import StreamFile

__all__ = ["ContextWriter", "thread_parents", "write_contexts"]

_BUFFER_BYTES = 1 << 20


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


class ContextWriter:
    """Append one (maybe empty) context per email; `close()` moves both files into place."""

    def __init__(self, data_dir: Path, split: str, vocab_size: int) -> None:
        self.dtype = token_dtype(vocab_size)
        self.paths = ctx_paths(data_dir, split)
        self._tmp = tuple(p.with_name(f".{p.name}.tmp") for p in self.paths)
        self._files = [StreamFile(t, _BUFFER_BYTES, shown=p) for t, p in zip(self._tmp, self.paths)]
        self.num_tokens = 0

    def keep(self, data_dir: Path, split: str) -> None:
        """Start with an earlier DATA_DIR's contexts of `split`, as they are (`prepare --update`)."""
        bin_path, idx_path = ctx_paths(data_dir, split)
        self.num_tokens = copy_into(self._files[0], bin_path) // self.dtype.itemsize
        copy_into(self._files[1], idx_path)

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


def context_body(text: bytes) -> bytes:
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
    bodies = {i: context_body(rec.text) for i, rec in enumerate(iter_spool(spool)) if i in wanted}

    def parent_body(i: int, split: str) -> bytes | None:
        parent = int(parents[i])
        return bodies[parent] if parent >= 0 and splits[parent] == split else None  # a parent shares its thread

    counts = write_context_files(out, tok, ctx_spool, splits, parent_body)
    return {"max_chars": MAX_CONTEXT_CHARS, "sources": list(CONTEXT_SOURCES), "splits": counts}


def write_context_files(out: Path, tok: Tokenizer, ctx_spool: Path, splits: Sequence[str],
                        parent_body: Callable[[int, str], bytes | None],
                        keep_from: Path | None = None) -> dict[str, dict[str, int]]:
    """Each spooled email's context into `{split}.ctx.bin/.idx` under `out`: its quoted text, else
    `parent_body(i, split)` (its parent's body when the parent is known and in the same split), else nothing;
    the counts per split and source. With `keep_from` (a DATA_DIR grown by `prepare --update`), its context
    files come first, as they are."""
    counts = {s: {"quoted": 0, "thread": 0, "none": 0, "tokens": 0} for s in SPLITS}
    writers: dict[str, ContextWriter] = {}
    try:
        for s in SPLITS:
            writers[s] = ContextWriter(out, s, tok.vocab_size)
            if keep_from is not None:
                writers[s].keep(keep_from, s)
        batch: list[tuple[str, bytes]] = []
        for i, quoted in enumerate(iter_context_spool(ctx_spool)):
            split = splits[i]
            body = None if quoted else parent_body(i, split)
            if quoted:
                source, text = "quoted", quoted
            elif body is not None:
                source, text = "thread", body
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
    return counts


def _flush(batch: list[tuple[str, bytes]], tok: Tokenizer, writers: dict[str, ContextWriter],
           counts: dict[str, dict[str, int]]) -> None:
    for (split, _), ids in zip(batch, _encode(tok, [t for _, t in batch])):
        writers[split].add(ids)
        counts[split]["tokens"] += len(ids)
    batch.clear()
