"""Compact tables for corpora bigger than memory: 64-bit digests of strings, and a set of them.

`prepare` must remember something about every email it has kept (to find duplicates, to link threads),
so that memory grows with the corpus; these tables keep the growth to about 8 bytes per remembered
string instead of the string itself (a Python `set` of `bytes` holds an object per entry).

- `digest64(text)`: the first 8 bytes of blake2b of the text's UTF-8 bytes (lone surrogates kept with
  "surrogatepass", so distinct strings give distinct inputs), as an unsigned int.
- `DigestSet`: membership of 64-bit digests in a sorted numpy array, with a small Python set of the most
  recent additions in front of it that is merged into the array every `buffer` additions.

Two different strings share a 64-bit digest with probability about n^2 / 2^65 among n strings: about
3e-8 for a million. That is the only way a digest table can differ from a table of the strings.
"""

from __future__ import annotations

import hashlib

import numpy as np

DIGEST_BYTES = 8


def digest64(text: str) -> int:
    """First 8 bytes of blake2b(text as UTF-8, lone surrogates kept) as an int in [0, 2^64)."""
    data = text.encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=DIGEST_BYTES).digest(), "little")


def bytes_key(digest: bytes) -> int:
    """A 64-bit key from a longer digest (its first 8 bytes), for a `DigestSet`."""
    return int.from_bytes(digest[:DIGEST_BYTES], "little")


class DigestSet:
    """A set of 64-bit ints in about 8 bytes each (plus at most `buffer` recent ones in a Python set).

    Lookups check the recent set, then binary-search the sorted array. Merging sorts the concatenation
    of two sorted runs with numpy's stable sort (timsort: linear on two runs), so building a set of n
    keys costs O(n^2 / buffer) element moves, a few seconds for tens of millions.
    """

    def __init__(self, buffer: int = 1 << 14) -> None:
        if buffer < 1:
            raise ValueError(f"buffer must be at least 1, not {buffer}")
        self._buffer = buffer
        self._sorted = np.empty(0, dtype=np.uint64)
        self._recent: set[int] = set()

    def __contains__(self, key: int) -> bool:
        if key in self._recent:
            return True
        keys = self._sorted
        i = int(keys.searchsorted(np.uint64(key)))
        return i < len(keys) and int(keys[i]) == key

    def add(self, key: int) -> None:
        """Remember `key` (an int in [0, 2^64)); callers add keys they found absent (one already merged
        into the array would be stored twice, harmless but counted twice by `len`)."""
        self._recent.add(key)
        if len(self._recent) >= self._buffer:
            self._merge()

    def _merge(self) -> None:
        recent = np.fromiter(self._recent, dtype=np.uint64, count=len(self._recent))
        recent.sort()
        both = np.concatenate((self._sorted, recent))
        both.sort(kind="stable")
        self._sorted = both
        self._recent = set()

    def __len__(self) -> int:
        return len(self._sorted) + len(self._recent)

    def array(self) -> np.ndarray:
        """Every key, sorted (uint64): what `prepare --update` keeps of the set in the DATA_DIR."""
        self._merge()
        return self._sorted

    @classmethod
    def from_array(cls, keys: np.ndarray, buffer: int = 1 << 14) -> DigestSet:
        """A set holding `keys` (sorted uint64, as `array` gives them)."""
        out = cls(buffer)
        out._sorted = np.asarray(keys, dtype=np.uint64)
        return out

    @property
    def nbytes(self) -> int:
        """Bytes held by the sorted array (the recent set adds at most `buffer` entries)."""
        return int(self._sorted.nbytes)
