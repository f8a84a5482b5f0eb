"""Threads and splits by their definition, in memory: union-find over the Message-IDs (`assign_threads`) and
dedupe, thread and split chained on a list of emails (`split_corpus`). `prepare` computes the same on
compact digest tables (seqlab/data/prepare/threadtable.py), which tests/test_compact_tables.py and
tests/test_prepare_pipeline.py hold to this reference; tests/test_corpus.py tests the definitions here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from seqlab.data.layout import SPLITS
from seqlab.data.mail.records import Email
from seqlab.data.prepare.dedupe import Deduper
from seqlab.data.prepare.thread_keys import DEFAULT_FRACTIONS, ThreadMeta, check_fractions, split_for_thread, utc_date


def check(deduper: Deduper, email: Email) -> str | None:
    """One email through `deduper` as `prepare` puts it through (digests, then the check): None when kept."""
    return deduper.check_keys(*deduper.keys(email))


class _UnionFind:
    """Union-find over string nodes with path halving."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        parent = self.parent
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


def assign_threads(metas: Sequence[ThreadMeta]) -> list[str]:
    """Thread key of each message, in input order.

    Messages are linked with union-find through References/In-Reply-To, then header-less messages with
    the same subject key (normalized subject + participant set) are joined. A thread's key is one of
    its header roots, i.e. the Message-IDs that no References/In-Reply-To link names as a child: in
    well-formed mail the first message of the thread, whether present or only referenced. With several
    roots (subject-joined conversations) the earliest one wins, undated ones (including roots that are
    only referenced) before dated ones since their age is unknown, ties by id. So a reply, the late
    arrival of a thread's missing first message, or newer header-less mail joining by subject all
    leave the key (and the split) unchanged; only mail that links previously separate threads, or
    that is older than a thread's root, can change it. A reference cycle with no root falls back to
    its smallest id. Nodes are namespaced ("m:" ids, "s:" subject
    keys) inside union-find only.
    """
    uf = _UnionFind()
    children: set[str] = set()
    dates: dict[str, str] = {}
    for meta in metas:
        uf.find("m:" + meta.node)
        for parent, child in meta.header_edges():
            uf.union("m:" + parent, "m:" + child)
            children.add(child)
        skey = meta.subject_key()
        if skey is not None:
            uf.union("s:" + skey, "m:" + meta.node)
        d = utc_date(meta.date)
        if d is not None and (meta.node not in dates or d < dates[meta.node]):
            dates[meta.node] = d
    best: dict[str, tuple[int, str, str]] = {}  # component representative -> rank of its best node
    for node in list(uf.parent):
        if not node.startswith("m:"):
            continue
        name = node[2:]
        # Roots rank first (0), then non-roots (1, only chosen in a cycle); undated ("") before dated.
        rank = (0 if name not in children else 1, dates.get(name, ""), name)
        rep = uf.find(node)
        if rep not in best or rank < best[rep]:
            best[rep] = rank
    return [best[uf.find("m:" + meta.node)][2] for meta in metas]


@dataclass
class CorpusSplit:
    """Result of `split_corpus`: kept emails per split (input order kept) and what was removed."""

    splits: dict[str, list[Email]]
    duplicates: Counter  # "duplicate" and "duplicate_body" counts
    threads: int  # number of distinct threads among kept emails

    def counts(self) -> dict[str, int]:
        """Emails per split."""
        return {name: len(emails) for name, emails in self.splits.items()}


def split_corpus(
    emails: Iterable[Email], seed: int = 0, fractions: Sequence[float] = DEFAULT_FRACTIONS
) -> CorpusSplit:
    """Dedupe, thread and split in memory: the definitions `prepare` streams on compact tables.

    Each kept email's `thread` field is set to its reconstructed thread key.
    """
    fr = check_fractions(fractions)
    deduper = Deduper()
    kept = [e for e in emails if check(deduper, e) is None]
    keys = assign_threads([ThreadMeta.from_email(e) for e in kept])
    splits: dict[str, list[Email]] = {name: [] for name in SPLITS}
    cache: dict[str, str] = {}
    for email, key in zip(kept, keys):
        email.thread = key
        if key not in cache:
            cache[key] = split_for_thread(key, seed, fr)
        splits[cache[key]].append(email)
    dup = Counter({k: deduper.counts[k] for k in ("duplicate", "duplicate_body")})
    return CorpusSplit(splits=splits, duplicates=dup, threads=len(cache))
