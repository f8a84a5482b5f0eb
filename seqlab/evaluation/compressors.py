"""The split as the model is scored on it (bytes and texts), and classical compressors' bits per byte.

The compressors read exactly the bytes the model's bits per byte divide by (`seqlab.evaluation.heldout`):
each email's text followed by SEPARATOR, the byte its eos counts for.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
from collections.abc import Iterable

from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import Tokenizer
from seqlab.evaluation.heldout import SEPARATOR


def split_bytes(store: TokenStore, tokenizer: Tokenizer) -> bytes:
    """The split's text as the model is scored on it: each email's bytes followed by SEPARATOR."""
    table = [tokenizer.token_bytes(i) for i in range(tokenizer.vocab_size)]
    special = {tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id}
    parts = []
    for i in range(store.num_emails):
        parts.extend(table[t] for t in store.email(i).tolist() if t not in special)
        parts.append(SEPARATOR)
    return b"".join(parts)


def split_texts(store: TokenStore, tokenizer: Tokenizer, emails: Iterable[int] | None = None) -> list[str]:
    """Texts ("subject\\n\\nbody") of the split's emails, decoded from their stored tokens."""
    picked = range(store.num_emails) if emails is None else emails
    return [tokenizer.decode(store.email(int(i)).tolist()) for i in picked]


def compressor_bpb_bytes(data: bytes) -> dict[str, float]:
    """8 * compressed size / raw size for gzip -9, bz2 -9 and xz -9e on `data`."""
    if not data:
        raise ValueError("cannot compute bits per byte of empty text")
    sizes = {
        "gzip": len(gzip.compress(data, compresslevel=9, mtime=0)),
        "bz2": len(bz2.compress(data, compresslevel=9)),
        "xz": len(lzma.compress(data, format=lzma.FORMAT_XZ, preset=9 | lzma.PRESET_EXTREME)),
    }
    return {name: 8.0 * size / len(data) for name, size in sizes.items()}


def compressor_bpb(texts: Iterable[str]) -> dict[str, float]:
    """Bits per byte of gzip, bz2 and xz at their strongest settings on the texts joined as the model
    is scored (each text's UTF-8 bytes followed by one separator byte)."""
    return compressor_bpb_bytes(b"".join(t.encode("utf-8", errors="replace") + SEPARATOR for t in texts))
