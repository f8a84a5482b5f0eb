"""Threads and splits of a corpus bigger than memory: the thread definition (`thread_keys.py`; its union-find
reference is `assign_threads` in tests/slow_threads.py) on digests in numpy arrays.

Union-find over strings keeps every email's `ThreadMeta` in memory. Here each email leaves only numbers
behind; the strings a thread key may be chosen from (Message-IDs and record ids) go to a names file on
disk, and come back only for the chosen keys.

    worker:  thread_links(meta) -> Links        digests (digests.digest64) of the nodes "m:<id>" and
                                                "s:<subject key>", the date as an order-preserving int
    main:    ThreadTable.add(links)             numbers into growing numpy arrays, names into the file
             ThreadTable.finish(seed, split)    components by min-label propagation over the edges,
                                                the key of each component ranked as assign_threads does,
                                                one split per component (thread_keys.split_for_thread)
             -> ThreadSplit                     per email: its thread key and split, read on demand
                                                (thread_split.py)

The keys and splits are exactly those of `assign_threads` and `split_for_thread` unless two different
ids share a 64-bit digest (digests.py); tests compare the two.

Memory: per email 8 (node) + 8 (date) + 4 (component) bytes, per header or subject link 16 bytes, per
name mention 20 bytes (digest, offset, length), and about twice that for a moment in `finish`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from seqlab.data.layout import SPLITS
from seqlab.data.prepare.digests import digest64
from seqlab.data.prepare.thread_keys import ThreadMeta, split_for_thread, utc_date
from seqlab.data.prepare.thread_split import NamesFile, ThreadSplit
from seqlab.private_files import private_opener

NAMES_FILE = "threads.names"  # the ids thread keys are chosen from, beside the spool
MIN_HELD_EMAILS = 10  # val and test of a date split: fewer lets --init pick its best step from noise
_FLUSH = 1 << 14  # list entries buffered before they become numpy arrays: a bounded Python list a column
_UNDATED = -1  # below every date key, as "" is below every date string in assign_threads


def date_key(date: str | None) -> int:
    """An int that orders `thread_keys.utc_date` strings exactly as string comparison does; -1 for none.

    strftime writes years below 1000 without leading zeros ("999-01-01T..."), so string order is not
    time order there: the year's digits are compared one by one, a missing digit (the "-" that follows
    a shorter year) below every digit. So the year is 4 base-11 digits (0 for a missing one, digit + 1
    otherwise), followed by the fixed-width MMDDhhmmss as a decimal number. A date that cannot be moved
    to UTC (assign_threads would raise) counts as undated.
    """
    try:
        d = utc_date(date)
    except OverflowError:  # a date near year 1 or 9999 moved out of range by its UTC offset
        return _UNDATED
    if d is None:
        return _UNDATED
    # utc_date writes exactly "<year>-MM-DDThh:mm:ss", the year in 1 to 4 digits.
    digits = d[:-15]
    year = 0
    for i in range(4):
        year = year * 11 + (ord(digits[i]) - 47 if i < len(digits) else 0)  # digit + 1, 0 for a missing one
    return year * 10**10 + int(d[-14:-12] + d[-11:-9] + d[-8:-6] + d[-5:-3] + d[-2:])


class Links(NamedTuple):
    """What threading needs of one email, as numbers plus the names that may become its thread key."""

    node: int  # digest of "m:" + its node (Message-ID, else record id)
    date: int  # date_key of its Date header
    parents: tuple[int, ...]  # header edges (parent, child): References / In-Reply-To chain, id aliases
    children: tuple[int, ...]
    subject: int | None  # digest of "s:" + subject key, for a header-less message with a subject
    mentions: tuple[int, ...]  # digests of the "m:" nodes named here, each once
    names: bytes  # their names, UTF-8 (surrogatepass), concatenated
    lengths: tuple[int, ...]  # byte length of each name


def thread_links(meta: ThreadMeta) -> Links:
    """The `Links` of one email (computed in a worker process)."""
    node = meta.node
    edges = meta.header_edges()
    named = dict.fromkeys([node, *(n for edge in edges for n in edge)])  # in order, each once
    encoded = [n.encode("utf-8", "surrogatepass") for n in named]
    skey = meta.subject_key()
    return Links(
        node=digest64("m:" + node), date=date_key(meta.date),
        parents=tuple(digest64("m:" + p) for p, _ in edges), children=tuple(digest64("m:" + c) for _, c in edges),
        subject=None if skey is None else digest64("s:" + skey),
        mentions=tuple(digest64("m:" + n) for n in named), names=b"".join(encoded),
        lengths=tuple(len(e) for e in encoded))


class _Column:
    """A growing 1-D numpy array: a Python list in front, numpy chunks behind."""

    def __init__(self, dtype: type) -> None:
        self.dtype = dtype
        self.items: list[int] = []
        self.chunks: list[np.ndarray] = []

    def flush(self) -> None:
        if self.items:
            self.chunks.append(np.array(self.items, dtype=self.dtype))
            self.items = []

    def array(self) -> np.ndarray:
        """All the values as one array; the column is left empty (its memory goes to the caller)."""
        self.flush()
        out = np.concatenate(self.chunks) if self.chunks else np.empty(0, dtype=self.dtype)
        self.chunks = []
        return out

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.chunks) + 8 * len(self.items)


class ThreadTable:
    """Collects `Links` in input order (`add`), then assigns threads and splits (`finish`).

    `names_path` is the file the names go to (appended to in batches, so no file stays open); the caller
    removes it once the `ThreadSplit` is closed.
    """

    def __init__(self, names_path: Path) -> None:
        self.names_path = Path(names_path)
        with open(self.names_path, "wb", opener=private_opener):  # the sender names of the mail: 0600
            pass
        self._names: list[bytes] = []  # names not yet appended to the file
        self._offset = 0
        self.emails = 0
        u64, i64, u32 = np.uint64, np.int64, np.uint32
        self._node, self._date = _Column(u64), _Column(i64)
        self._parent, self._child = _Column(u64), _Column(u64)  # header edges
        self._subject, self._subject_node = _Column(u64), _Column(u64)  # subject edges
        self._mention, self._name_off, self._name_len = _Column(u64), _Column(i64), _Column(u32)
        self._columns = (self._node, self._date, self._parent, self._child, self._subject, self._subject_node,
                         self._mention, self._name_off, self._name_len)

    def add(self, links: Links) -> None:
        """One kept email's links, in input order."""
        self._node.items.append(links.node)
        self._date.items.append(links.date)
        self._parent.items.extend(links.parents)
        self._child.items.extend(links.children)
        if links.subject is not None:
            self._subject.items.append(links.subject)
            self._subject_node.items.append(links.node)
        self._mention.items.extend(links.mentions)
        offset = self._offset
        for n in links.lengths:
            self._name_off.items.append(offset)
            self._name_len.items.append(n)
            offset += n
        self._names.append(links.names)
        self._offset = offset
        self.emails += 1
        if len(self._mention.items) >= _FLUSH:
            self._flush()

    def _flush(self) -> None:
        for column in self._columns:
            column.flush()
        with open(self.names_path, "ab", opener=private_opener) as f:
            f.write(b"".join(self._names))
        self._names = []

    @property
    def nbytes(self) -> int:
        """Bytes the table holds in memory so far (numpy chunks, and 8 per buffered list entry)."""
        return sum(c.nbytes for c in self._columns)

    def finish(self, seed: int, fractions: Sequence[float], by_date: bool = False,
               min_held: int = 0) -> ThreadSplit:
        """Thread key and split of every email added, as `assign_threads` and `split_for_thread` give them;
        with `by_date`, the split of each thread is by its first email's date instead (`split_by_date`)."""
        self._flush()
        n, at, universe = self._index()
        label = _components(n, np.concatenate((at["parent"], at["subject"])),
                            np.concatenate((at["child"], at["subject_node"])))
        del at["parent"], at["subject_node"]
        flag = np.zeros(n, dtype=np.int8)  # 1: named as a child by some header link (not a root)
        flag[at.pop("child")] = 1
        date = self._date.array()
        best_date = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        dated = date != _UNDATED
        np.minimum.at(best_date, at["node"][dated], date[dated])
        email_date = date if by_date else None  # (emails,) kept for the date split only
        del date, dated
        best_date[best_date == np.iinfo(np.int64).max] = _UNDATED
        name_off = np.zeros(n, dtype=np.int64)
        name_len = np.zeros(n, dtype=np.uint32)
        name_off[at["mention"]], name_len[at["mention"]] = self._name_off.array(), self._name_len.array()
        del at["mention"]
        candidate = np.ones(n, dtype=bool)
        candidate[at.pop("subject")] = False  # "s:" nodes are never keys
        names = NamesFile(self.names_path)
        try:
            key = _choose_keys(label, flag, best_date, candidate, names, name_off, name_len)
            del flag, best_date, candidate
            comps, email_comp = np.unique(label[at.pop("node")], return_inverse=True)
            comp_key = key[comps]
            first = None
            if email_date is not None:
                first = np.full(len(comps), np.iinfo(np.int64).max, dtype=np.int64)
                np.minimum.at(first, email_comp, email_date)  # undated emails (-1) count as the oldest
                split = split_by_date(first, np.bincount(email_comp, minlength=len(comps)), fractions, min_held)
            else:
                split = np.array([SPLITS.index(split_for_thread(names.get(name_off[k], name_len[k]), seed,
                                                                fractions))
                                  for k in comp_key.tolist()], dtype=np.uint8)
        except BaseException:
            names.close()
            raise
        split_ = ThreadSplit(names, email_comp.astype(np.int32), name_off[comp_key], name_len[comp_key], split)
        # every node's thread (each component holds an email): what `prepare --update` joins new mail to
        split_.node_digests, split_.node_comp = universe, np.searchsorted(comps, label).astype(np.int32)
        split_.first_date = first  # (components,) the date key of each thread's first email, for a date split
        return split_

    def _index(self) -> tuple[int, dict[str, np.ndarray], np.ndarray]:
        """The number of distinct nodes, each column of digests as node indices (digest order), and the
        distinct node digests (sorted).

        Each digest column is freed as soon as it is indexed, so the peak is the digests once, the
        mentions and subjects sorted, and the (4-byte) indices.
        """
        columns = {"node": self._node, "parent": self._parent, "child": self._child, "subject": self._subject,
                   "mention": self._mention, "subject_node": self._subject_node}
        digests = {name: column.array() for name, column in columns.items()}
        # Every "m:" node (an email's own, either end of a header link) is among the mentions, and the
        # "s:" nodes are the subjects: the distinct nodes are the distinct values of those two columns.
        universe = np.concatenate((digests["mention"], digests["subject"]))
        universe.sort()  # in place, where np.unique would sort a second copy
        distinct = np.ones(len(universe), dtype=bool)
        distinct[1:] = universe[1:] != universe[:-1]
        universe = universe[distinct]
        del distinct
        dtype = np.int32 if len(universe) < 2**31 else np.int64
        at = {name: universe.searchsorted(digests.pop(name)).astype(dtype) for name in list(digests)}
        return len(universe), at, universe


def _components(n: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Connected components of n nodes and the edges (u[i], v[i]): each node's smallest member's index.

    Hook and compress: every root label takes the smallest label across its edges (np.minimum.at), then
    labels jump to their label's label until they point at roots. Each round at least halves the number
    of components an edge still spans, so the rounds are few (threads are short).
    """
    label = np.arange(n, dtype=u.dtype)
    while True:
        lu, lv = label[u], label[v]
        split_edges = lu != lv
        if not split_edges.any():
            return label
        lu, lv = lu[split_edges], lv[split_edges]
        low = np.minimum(lu, lv)
        np.minimum.at(label, lu, low)
        np.minimum.at(label, lv, low)
        while True:
            jumped = label[label]
            if np.array_equal(jumped, label):
                break
            label = jumped


def _choose_keys(label: np.ndarray, flag: np.ndarray, date: np.ndarray, candidate: np.ndarray, names: NamesFile,
                 name_off: np.ndarray, name_len: np.ndarray) -> np.ndarray:
    """For each component label, the node ranked first by (flag, date, name), as in `assign_threads`.

    Sorting by (label, flag, date) finds each component's best (flag, date); names are read from the
    names file only where several nodes share it (subject-joined roots that are only referenced, cycles).
    """
    nodes = np.flatnonzero(candidate)
    order = nodes[np.lexsort((date[nodes], flag[nodes], label[nodes]))]
    lab, fl, dt = label[order], flag[order], date[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = lab[1:] != lab[:-1]
    starts = np.flatnonzero(first)
    key = np.full(len(label), -1, dtype=np.int64)
    key[lab[starts]] = order[starts]
    # A row ties with its component's first row when (flag, date) equal it; such rows follow it directly.
    head = np.repeat(starts, np.diff(np.append(starts, len(order))))
    tied = (~first) & (fl == fl[head]) & (dt == dt[head])
    for s in np.unique(head[tied]).tolist():
        e = s + 1
        while e < len(order) and tied[e]:
            e += 1
        key[lab[s]] = min(order[s:e].tolist(), key=lambda k: names.get(name_off[k], name_len[k]))
    return key


def split_by_date(first_date: np.ndarray, emails: np.ndarray, fractions: Sequence[float],
                  min_held: int = 0) -> np.ndarray:
    """(threads,) uint8 split codes: earlier threads train, later ones are held out.

    A person's mail is small and changes over time, so a hashed split leaves validation a handful of emails
    from anywhere in their history; here the threads, ordered by their first email's date (ties in input
    order), go from the latest back: test takes them until it holds its fraction of the emails (and at least
    `min_held`), then val likewise, and the rest train. Train always keeps the oldest thread."""
    n, total = len(emails), int(emails.sum())
    order = np.lexsort((np.arange(n), first_date))  # oldest first
    split = np.zeros(n, dtype=np.uint8)  # SPLITS[0] is train
    want = {s: (max(round(f * total), min_held) if f > 0 else 0) for s, f in zip(SPLITS, fractions)}
    at = n - 1
    for name in ("test", "val"):
        held = 0
        while held < want[name] and at > 0:
            split[order[at]] = SPLITS.index(name)
            held += int(emails[order[at]])
            at -= 1
    return split
