"""The spooled emails as token files: each email tokenized (`encode_texts`, in chunks of ENCODE_CHUNK
through the tokenizer's batch encoder) and appended to its split's `{split}.bin` / `{split}.idx`
(`token_files.TokenWriter`), with one line of `emails.jsonl` per email. The last stage of `prepare`: by then
every email's split and thread are known.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import islice
from pathlib import Path

import numpy as np
from tqdm import tqdm

from seqlab.data.layout import SPLITS, token_dtype
from seqlab.data.prepare.spool import iter_spool
from seqlab.data.prepare.token_files import TokenWriter, copy_into
from seqlab.data.tokenizer import ByteTokenizer, Tokenizer
from seqlab.durable import StreamFile

__all__ = ["ENCODE_CHUNK", "encode_all", "encode_texts"]

ENCODE_CHUNK = 512  # emails per encode_batch call


def encode_texts(tok: Tokenizer, texts: Sequence[bytes]) -> list[np.ndarray]:
    """`tok.encode_email` of each UTF-8 text, as arrays; the byte tokenizer copies the bytes directly.

    For the byte tokenizer the ids of a text are its UTF-8 bytes (tokenizer.py), so no Python-level
    list of ints is built: one numpy copy per email instead of a Python step per byte.
    """
    if isinstance(tok, ByteTokenizer):
        out = []
        for text in texts:
            ids = np.empty(len(text) + 2, dtype=np.uint16)  # (n + 2,): bos, the bytes, eos
            ids[0], ids[-1] = tok.bos_id, tok.eos_id
            ids[1:-1] = np.frombuffer(text, dtype=np.uint8)
            out.append(ids)
        return out
    encoded = tok.encode_batch([t.decode("utf-8") for t in texts])
    return [np.array([tok.bos_id, *ids, tok.eos_id], dtype=np.int64) for ids in encoded]


def encode_all(spool: Path, out: Path, tok: Tokenizer, threads: Sequence[str], splits: Sequence[str],
                progress: bool, thread_counts: dict[str, int]) -> tuple[dict[str, dict[str, int]], str]:
    """Encode every spooled email into its split's token store and write emails.jsonl.

    Returns the counts per split and the name of the on-disk token dtype.
    """
    counts = {s: {"emails": 0, "tokens": 0, "bytes": 0, "threads": 0} for s in SPLITS}
    write_token_files(spool, out, tok, threads, splits, counts, progress)
    for s in SPLITS:
        counts[s]["threads"] = thread_counts[s]
    return counts, str(token_dtype(tok.vocab_size))


def write_token_files(spool: Path, out: Path, tok: Tokenizer, threads: Sequence[str], splits: Sequence[str],
                      counts: dict[str, dict[str, int]], progress: bool, keep_from: Path | None = None) -> None:
    """The token files and emails.jsonl under `out`, every spooled email added to its split (`encode_into`,
    counted in `counts`); all of them aborted if one fails. With `keep_from` (a DATA_DIR grown by
    `prepare --update`), its token files and emails.jsonl come first, as they are."""
    writers: dict[str, TokenWriter] = {}
    index = StreamFile(out / "emails.jsonl")
    try:
        if keep_from is not None:
            copy_into(index, keep_from / "emails.jsonl")
        for s in SPLITS:
            writers[s] = TokenWriter(out, s, tok.vocab_size)
            if keep_from is not None:
                writers[s].keep(keep_from / f"{s}.bin", keep_from / f"{s}.idx")
        encode_into(spool, writers, index, tok, threads, splits, counts, progress)
        index.close()
        for w in writers.values():
            w.close()
    except BaseException:
        index.abort()
        for w in writers.values():
            w.abort()
        raise


def encode_flat(tok: Tokenizer, texts: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(flat (N,), lengths (E,)): `encode_texts` of the texts end to end, and each one's token count.

    For the byte tokenizer in one pass over the joined bytes: each text gets a placeholder byte before
    and after it, the whole is widened to uint16 at once, and the placeholders become bos and eos.
    """
    if not isinstance(tok, ByteTokenizer):
        arrays = encode_texts(tok, texts)
        return np.concatenate(arrays), np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)) + 2  # bos + bytes + eos
    flat = np.frombuffer(b"\0" + b"\0\0".join(texts) + b"\0", dtype=np.uint8).astype(np.uint16)
    ends = np.cumsum(lengths)  # (E,) one past each email's eos
    flat[ends - lengths] = tok.bos_id
    flat[ends - 1] = tok.eos_id
    return flat, lengths


_JSON_STR = json.encoder.encode_basestring  # what json.dumps(..., ensure_ascii=False) writes for a str


def index_line(ident: str, thread: str, split: str, source: str, tokens: int) -> str:
    """One line of emails.jsonl: `json.dumps({"id": ..., "thread": ..., "split": ..., "source": ...,
    "tokens": ...}, ensure_ascii=False) + "\n"`, character for character, without building the dict."""
    return (f'{{"id": {_JSON_STR(ident)}, "thread": {_JSON_STR(thread)}, "split": {_JSON_STR(split)}, '
            f'"source": {_JSON_STR(source)}, "tokens": {int(tokens)}}}\n')


def encode_into(spool: Path, writers: dict[str, TokenWriter], index: StreamFile, tok: Tokenizer,
                threads: Sequence[str], splits: Sequence[str], counts: dict[str, dict[str, int]],
                progress: bool) -> None:
    """The encoding loop of `encode_all`: token stores, emails.jsonl lines and the counts per split.

    A chunk of spooled emails is encoded per split at once (`encode_flat`, `TokenWriter.add_flat`); each
    split's files get its emails in input order, as one email at a time would write them."""
    records = iter_spool(spool)
    i = 0
    with tqdm(total=len(splits), desc="encoding", unit=" email", disable=not progress) as bar:
        while chunk := list(islice(records, ENCODE_CHUNK)):
            labels = [splits[i + n] for n in range(len(chunk))]
            tokens = [0] * len(chunk)
            for split in SPLITS:
                members = [n for n, s in enumerate(labels) if s == split]
                if not members:
                    continue
                texts = [chunk[n].text for n in members]
                flat, lengths = encode_flat(tok, texts)
                writers[split].add_flat(flat, lengths)
                c = counts[split]
                c["emails"] += len(members)
                c["tokens"] += int(flat.size)
                c["bytes"] += sum(map(len, texts))
                for n, length in zip(members, lengths.tolist()):
                    tokens[n] = length
            lines = [index_line(rec.id, threads[i + n], labels[n], rec.source, tokens[n])
                     for n, rec in enumerate(chunk)]
            index.write("".join(lines).encode("utf-8"))
            i += len(chunk)
            bar.update(len(chunk))
