"""The first stages of `prepare`: read -> parse and clean (in worker processes) -> dedupe -> spool.

Each kept email leaves the main process at once: its training text goes to the spool, the text it quotes
to the context spool (`spool.py`), its threading links to the thread table (`threadtable.py`), and its
own and its In-Reply-To node digests to two arrays (its parent, for its context, is found from them once
every email is known: `reply_files.thread_parents`). Memory stays bounded whatever the corpus size.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from tqdm import tqdm

from seqlab.data.mail.clean import CleanOptions
from seqlab.data.mail.records import SkipReport
from seqlab.data.prepare.dedupe import Deduper
from seqlab.data.prepare.spool import ContextSpool, SpoolWriter
from seqlab.data.prepare.threadtable import ThreadTable
from seqlab.data.prepare.workers import Item, StreamStats, parse_stream, peak_rss_bytes, source_items

__all__ = ["SpooledMail", "spool_mail"]


class SpooledMail(NamedTuple):
    """What the read stages leave for the rest of `prepare`."""

    table: ThreadTable  # each kept email's threading links, in input order
    report: SkipReport  # messages seen, kept, and skipped by reason
    duplicates: dict[str, int]  # emails dropped as "duplicate" / "duplicate_body"
    nodes: np.ndarray  # (N,) uint64 digest of each kept email's node
    replies: np.ndarray  # (N,) uint64 digest of its In-Reply-To node, 0 without one
    deduper: Deduper | None = None  # its keys are kept in the DATA_DIR for `prepare --update` (held.py)


def spool_mail(messages: Path | str | Iterable[Item], opts: CleanOptions, limit: int | None, spool: Path,
               context_spool: Path, names: Path, workers: int, progress: bool, stats: dict[str, Any],
               deduper: Deduper | None = None) -> SpooledMail:
    """Read, clean and dedupe; spool each kept email (`spool`, `context_spool`) and its thread links (`names`).

    `deduper` (default: a new one) may already hold a DATA_DIR's mail (`prepare --update`). `stats` gets the
    seconds the main process spent on dedupe and spool writes (the rest of this stage's wall time is reading
    and parsing, mostly overlapped with it when workers parse).
    """
    deduper = deduper if deduper is not None else Deduper()
    report, table, stream = SkipReport(), ThreadTable(names), StreamStats()
    spent = 0.0
    contexts = ContextSpool(context_spool)
    nodes, replies = array("Q"), array("Q")
    with SpoolWriter(spool) as writer, tqdm(desc="reading mail", unit=" msg", disable=not progress) as bar:
        for kept in parse_stream(source_items(messages, limit), opts, report, workers=workers, stats=stream):
            t0 = time.perf_counter()
            for k in kept:
                if deduper.check_keys(k.exact, k.body_key) is not None:
                    continue
                table.add(k.links)
                writer.write(k.record)
                contexts.write(k.context)
                nodes.append(k.links.node)
                replies.append(k.reply_to)
            spent += time.perf_counter() - t0
            bar.update(report.seen - bar.n)
    contexts.close()
    stats.update(dedupe_spool_s=spent, raw_bytes=stream.raw_bytes, workers_used=stream.workers,
                 pool_fallback=stream.fallback, read_peak_rss_bytes=peak_rss_bytes(),
                 table_bytes=table.nbytes + deduper.nbytes, kept_emails=table.emails)
    duplicates = {reason: deduper.counts[reason] for reason in ("duplicate", "duplicate_body")}
    if deduper.counts["held"]:
        duplicates["held"] = deduper.counts["held"]
    return SpooledMail(table, report, duplicates, np.frombuffer(nodes, dtype=np.uint64),
                       np.frombuffer(replies, dtype=np.uint64), deduper)
