"""Parsing mail in worker processes: raw messages in, kept-email records out, in input order.

Reading mail is CPU-bound Python (the stdlib parser, decoding, cleaning), so `prepare` spreads it over
processes. The main process reads the source (mbox splitting,
file reads) and cuts the raw messages into chunks; workers parse, clean, compute the dedupe digests and
the threading links (as digests), and pack the spool record, so the main process only checks digests and writes.

Determinism: chunks are submitted and collected in input order, and the work per message is the same
function in-process and in a worker (`parse_chunk`), so any number of workers gives byte-identical output.
Memory: at most `INFLIGHT_PER_WORKER * workers` chunks (each about `CHUNK_BYTES` of raw mail) exist at
once. A small input is parsed in-process, since starting workers costs more than it saves; see
`POOL_MIN_MESSAGES`. On Linux workers are forked (see `_context`).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import NamedTuple

from seqlab.data.mail.message_files import FoundItems, iter_source_items
from seqlab.data.mail.reader import CleanOptions, parse_message
from seqlab.data.mail.records import SkipReport
from seqlab.data.prepare.dedupe import Deduper
from seqlab.data.prepare.digests import digest64
from seqlab.data.prepare.spool import pack_record
from seqlab.data.prepare.thread_keys import ThreadMeta, norm_id
from seqlab.data.prepare.threadtable import Links, thread_links

Item = tuple[str, "bytes | str"]  # (label, raw bytes or the skip reason the source already found)

CHUNK_MESSAGES = 128  # enough parsing a chunk that its overhead (pickling, a future) is small beside it
CHUNK_BYTES = 1 << 20  # ... and at most about 1 MiB of raw mail (plus one message), whatever the message size
INFLIGHT_PER_WORKER = 3  # chunks queued per worker: enough to keep workers busy, few enough to bound memory
# Inputs with fewer messages and bytes than this are parsed in-process: starting forked workers and their
# first round trip cost as much as parsing a few hundred messages, so a smaller input gains nothing from them.
POOL_MIN_MESSAGES = 512
POOL_MIN_BYTES = 1 << 20
_DEDUPE = Deduper()  # only its pure `keys` method is used, so one shared instance is enough


class Kept(NamedTuple):
    """What the main process needs of one kept email; the text itself travels inside `record`."""

    exact: bytes  # Deduper.keys digests
    body_key: bytes | None
    links: Links  # what threading needs, as digests (threadtable.py)
    record: bytes  # spool.pack_record
    context: bytes = b""  # Email.context as UTF-8 (the replied-to text; reply_files.py)
    reply_to: int = 0  # digest64 of the In-Reply-To node (as Links.node digests nodes), 0 without one


@dataclass
class StreamStats:
    """Filled in by `parse_stream`: raw message bytes parsed and the processes that parsed them."""

    raw_bytes: int = 0
    workers: int = 1  # 1: in-process
    fallback: bool = False  # the worker pool broke (e.g. a worker was killed) and parsing went on in-process


def default_workers() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def peak_rss_bytes() -> int | None:
    """Peak resident memory of this process so far (ru_maxrss), or None where the OS does not say."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # macOS reports bytes, Linux KiB


def parse_chunk(chunk: list[Item], opts: CleanOptions) -> list[Kept | str]:
    """Each item -> `Kept` or its skip reason. The unit of work of a worker and of the in-process path."""
    out: list[Kept | str] = []
    for label, raw in chunk:
        result = raw if isinstance(raw, str) else parse_message(raw, label, opts)
        if isinstance(result, str):
            out.append(result)
            continue
        exact, body_key = _DEDUPE.keys(result)
        meta = ThreadMeta.from_email(result)
        reply_to = norm_id(meta.in_reply_to)  # the parent a reply that quotes nothing takes its context from
        out.append(Kept(exact, body_key, thread_links(meta), pack_record(result),
                        result.context.encode("utf-8", "replace"), digest64("m:" + reply_to) if reply_to else 0))
    return out


def source_items(source: Path | str | Iterable[tuple[str, bytes | str]], limit: int | None = None
                 ) -> Iterator[Item]:
    """At most `limit` items of a mail path (`message_files.iter_source_items`) or of a `(label, raw)` iterable.

    In a caller's iterable a str is message text (as `reader.parse_message` takes it), so it is encoded here and
    never mistaken for a skip reason.
    """
    if isinstance(source, (str, os.PathLike)):
        yield from iter_source_items(Path(source), limit)
        return
    if isinstance(source, FoundItems):  # a source's own items: its str items are skip reasons, kept as they are
        yield from islice(source, limit)
        return
    for label, raw in islice(source, limit):
        yield str(label), raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else bytes(raw)


def _chunks(items: Iterator[Item]) -> Iterator[list[Item]]:
    chunk: list[Item] = []
    size = 0
    for item in items:
        chunk.append(item)
        size += len(item[1])
        if len(chunk) >= CHUNK_MESSAGES or size >= CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _head(chunks: Iterator[list[Item]]) -> tuple[list[list[Item]], bool]:
    """The first chunks, up to the pool thresholds; True when the input is large enough for the pool."""
    head: list[list[Item]] = []
    messages = size = 0
    for chunk in chunks:
        head.append(chunk)
        messages += len(chunk)
        size += sum(len(raw) for _, raw in chunk)
        if messages >= POOL_MIN_MESSAGES or size >= POOL_MIN_BYTES:
            return head, True
    return head, False


def _account(results: list[Kept | str], chunk: list[Item], report: SkipReport, stats: StreamStats) -> list[Kept]:
    """Update the skip report for one chunk (kept + skipped == seen after each chunk); return the kept."""
    kept: list[Kept] = []
    for result, (_, raw) in zip(results, chunk):
        report.seen += 1
        if isinstance(raw, bytes):
            stats.raw_bytes += len(raw)
        if isinstance(result, str):
            report.skip(result)
        else:
            report.kept += 1
            kept.append(result)
    return kept


def _context() -> mp.context.BaseContext:
    """"fork" on Linux: workers start in milliseconds and never re-import the caller's main script (which
    "spawn" and "forkserver" do, so a caller's script without a `__main__` guard would run again in every
    worker). A worker runs only pure-Python parsing and exits, so locks or threads of the parent (torch's
    thread pool, tqdm's monitor) are never used in it. Elsewhere (macOS, Windows) fork is unsafe or absent.
    """
    if sys.platform.startswith("linux") and "fork" in mp.get_all_start_methods():
        return mp.get_context("fork")
    return mp.get_context("spawn")


def _worker_init() -> None:
    """Workers leave Ctrl-C to the main process, which stops the pool (no traceback from every worker)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _submit(pool: ProcessPoolExecutor | None, chunk: list[Item], opts: CleanOptions) -> Future | None:
    if pool is None:
        return None
    try:
        return pool.submit(parse_chunk, chunk, opts)
    except BrokenProcessPool:  # a worker died before this chunk was handed over
        return None


def _pooled(chunks: Iterator[list[Item]], opts: CleanOptions, workers: int, stats: StreamStats
            ) -> Iterator[tuple[list[Item], list[Kept | str]]]:
    """(chunk, results) in input order from a pool of `workers` processes, at most a few chunks in flight.

    When the pool breaks (a worker killed by the OS, say), every chunk it did not return, and every later
    one, is parsed in-process instead, so every message is still accounted for.
    """
    pending: deque[tuple[list[Item], Future | None]] = deque()
    pool: ProcessPoolExecutor | None = ProcessPoolExecutor(max_workers=workers, mp_context=_context(),
                                                           initializer=_worker_init)
    try:
        while True:
            while len(pending) < workers * INFLIGHT_PER_WORKER:
                chunk = next(chunks, None)
                if chunk is None:
                    break
                pending.append((chunk, _submit(pool, chunk, opts)))
            if not pending:
                return
            chunk, future = pending.popleft()
            results = None
            if future is not None:
                try:
                    results = future.result()
                except BrokenProcessPool:
                    pass
            if results is None:
                if pool is not None:
                    stats.fallback = True
                    pool.shutdown(wait=False, cancel_futures=True)
                    pool = None
                results = parse_chunk(chunk, opts)
            yield chunk, results
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def parse_stream(items: Iterable[Item], opts: CleanOptions, report: SkipReport, workers: int = 1,
                 stats: StreamStats | None = None) -> Iterator[list[Kept]]:
    """Kept emails of `items`, one list per chunk, in input order; `report` counts every item seen.

    `workers` > 1 parses in that many processes once the input is past the pool thresholds; the output
    is the same for any `workers`. After each yielded list, `report.kept + report.total_skipped ==
    report.seen`.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    stats = stats if stats is not None else StreamStats()
    chunks = _chunks(iter(items))
    head, large = _head(chunks) if workers > 1 else ([], False)
    if large:
        stats.workers = workers
        results = _pooled(_chain(head, chunks), opts, workers, stats)
    else:
        results = ((chunk, parse_chunk(chunk, opts)) for chunk in _chain(head, chunks))
    try:
        for chunk, parsed in results:
            yield _account(parsed, chunk, report, stats)
    finally:
        results.close()  # a consumer that stops early shuts the pool down now, not at garbage collection


def _chain(head: list[list[Item]], rest: Iterator[list[Item]]) -> Iterator[list[Item]]:
    while head:
        yield head.pop(0)  # pop, so the head's chunks can be freed as soon as they are parsed
    yield from rest
