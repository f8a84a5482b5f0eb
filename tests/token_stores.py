"""Token stores for the data tests: written from email lengths, most of them "position-coded".

In a position-coded store the token at global offset p is the id p itself, so a batch can be checked
against the file it came from: a pair (x, y) is a true next-token pair inside one email exactly when
y == x + 1 and both offsets lie in the same email.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from seqlab.data.batches import IGNORE_INDEX, eval_windows
from seqlab.data.prepare.token_files import TokenWriter
from seqlab.data.store import TokenStore, token_dtype

# Lengths with emails of 1 and 2 tokens, emails shorter than a window (T = 8) and several windows long.
LENGTHS = [1, 2, 5, 40, 3, 9, 8, 2, 17, 1, 64, 7, 30]
T = 8


def write_store(root: Path, lengths: list[int], vocab_size: int, rng: np.random.Generator | None = None,
                split: str = "train") -> list[np.ndarray]:
    """Write emails of the given lengths (random ids, or position-coded when rng is None) plus meta.json."""
    emails, offset = [], 0
    with TokenWriter(root, split, vocab_size) as w:
        for n in lengths:
            ids = rng.integers(0, vocab_size, size=n) if rng is not None else np.arange(offset, offset + n)
            assert w.add(ids) == offset
            emails.append(np.asarray(ids))
            offset += n
    (root / "meta.json").write_text(json.dumps({"token_dtype": str(token_dtype(vocab_size))}))
    return emails


def coded_store(root: Path, lengths: list[int]) -> tuple[TokenStore, int]:
    """A position-coded store and a pad id that is no token of it."""
    n = sum(lengths)
    write_store(root, lengths, vocab_size=n + 16)
    return TokenStore(root, "train"), n + 7


def email_of(store: TokenStore) -> np.ndarray:
    """Email index of every global token offset."""
    return np.repeat(np.arange(store.num_emails), store.lengths)


def target_positions(store: TokenStore) -> np.ndarray:
    """Every offset that is a target: all tokens except the first of each email."""
    keep = np.ones(store.num_tokens, dtype=bool)
    keep[store.starts] = False
    return np.flatnonzero(keep)


def check_pairs(store: TokenStore, x: torch.Tensor, y: torch.Tensor, pad: int) -> None:
    """Every kept target is the next token of its input inside one email; padding is ignored."""
    x, y = x.numpy(), y.numpy()
    assert x.dtype == np.int64 and y.dtype == np.int64
    real = x != pad
    assert np.all(y[~real] == IGNORE_INDEX)  # padding never carries a target
    kept = y != IGNORE_INDEX
    assert np.all(y[kept] == x[kept] + 1)  # y is x shifted by one token
    owner = email_of(store)
    assert np.all(owner[x[kept]] == owner[y[kept]])  # never across an email boundary


def eval_window_count(store: TokenStore, block_size: int, stride: int | None = None) -> int:
    """How many windows `iter_eval_windows` yields in all."""
    return len(eval_windows(store, block_size, stride)[0])
