"""What threading leaves behind, read on demand: per email its thread key and split (`ThreadSplit`, built by
`ThreadTable.finish` in `threadtable.py`) from compact arrays, and the names file the keys are read back from."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from seqlab.data.layout import SPLITS

_BLOCK = 1 << 14  # split codes turned into names per block while iterating


class NamesFile:
    """The names file, read back one name at a time (a seek and a read).

    Not memory-mapped: the pages of a mapping that have been read count as the process's resident
    memory, and reading every email's thread key would bring the whole file in (tens of MB a million
    emails).
    """

    def __init__(self, path: Path) -> None:
        self._file = open(path, "rb", buffering=0)  # noqa: SIM115 - closed in close()

    def get(self, offset: int, length: int) -> str:
        self._file.seek(int(offset))
        return self._file.read(int(length)).decode("utf-8", "surrogatepass")

    def close(self) -> None:
        self._file.close()


class ThreadSplit:
    """Per email (input order): its thread key (`threads[i]`) and split (`splits[i]`), from compact arrays."""

    def __init__(self, names: NamesFile, email_comp: np.ndarray, key_off: np.ndarray, key_len: np.ndarray,
                 split: np.ndarray) -> None:
        self._names = names
        self.email_comp = email_comp  # (emails,) int32 component number of each email
        self._key_off, self._key_len = key_off, key_len  # (components,) where each key's name is
        self.split_codes = split  # (components,) index into SPLITS
        self.threads = _Threads(self)
        self.splits = _Splits(self)
        self.node_digests = np.empty(0, dtype=np.uint64)  # (nodes,) sorted digests of every node ("m:", "s:")
        self.node_comp = np.empty(0, dtype=np.int32)  # (nodes,) the component each belongs to
        self.first_date: np.ndarray | None = None  # with by_date: (components,) each one's first date_key

    def thread(self, i: int) -> str:
        c = self.email_comp[i]
        return self._names.get(self._key_off[c], self._key_len[c])

    def split(self, i: int) -> str:
        return SPLITS[self.split_codes[self.email_comp[i]]]

    def key(self, comp: int) -> str:
        """The thread key of component `comp`."""
        return self._names.get(self._key_off[comp], self._key_len[comp])

    def __len__(self) -> int:
        return len(self.email_comp)

    def thread_counts(self) -> dict[str, int]:
        """Threads per split (every thread holds at least one email)."""
        counts = np.bincount(self.split_codes, minlength=len(SPLITS))
        return {s: int(counts[i]) for i, s in enumerate(SPLITS)}

    def close(self) -> None:
        self._names.close()


class _Threads(Sequence[str]):
    """`ThreadSplit.thread` as a read-only sequence (integer indices only)."""

    def __init__(self, owner: ThreadSplit) -> None:
        self._owner = owner

    def __len__(self) -> int:
        return len(self._owner)

    def __getitem__(self, i: int) -> str:  # type: ignore[override]
        return self._owner.thread(i)


class _Splits(Sequence[str]):
    """`ThreadSplit.split` as a read-only sequence (integer indices only), iterated in blocks."""

    def __init__(self, owner: ThreadSplit) -> None:
        self._owner = owner

    def __len__(self) -> int:
        return len(self._owner)

    def __getitem__(self, i: int) -> str:  # type: ignore[override]
        return self._owner.split(i)

    def __iter__(self) -> Iterator[str]:
        codes = self._owner.split_codes[self._owner.email_comp]
        for start in range(0, len(codes), _BLOCK):
            yield from (SPLITS[c] for c in codes[start:start + _BLOCK].tolist())

    def __contains__(self, name: object) -> bool:
        return name in SPLITS and bool((self._owner.split_codes == SPLITS.index(name)).any())
