"""The mail reader as a plain stream, for tests: `read_emails` (every message of a source through
`parse_message`, in input order, counted in a `SkipReport`), `iter_raw_messages` (a source's raw messages)
and `balanced` (every message seen was kept or skipped). `prepare` reads mail through its worker stage
(seqlab/data/prepare/workers.py), which the pipeline tests hold to the same records.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from seqlab.data.mail.clean import CleanOptions
from seqlab.data.mail.message_files import iter_source_items
from seqlab.data.mail.reader import parse_message
from seqlab.data.mail.records import Email, SkipReport


def balanced(report: SkipReport) -> bool:
    """Every message is accounted for: kept + skipped == seen."""
    return report.kept + report.total_skipped == report.seen


def _as_bytes(messages: Iterable[tuple[str, bytes | str]]) -> Iterator[tuple[str, bytes]]:
    # In a caller's iterable a str is message text (not a skip reason, as from iter_source_items).
    for label, raw in messages:
        yield str(label), raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else bytes(raw)


def read_emails(path_or_messages: Path | str | Iterable[tuple[str, bytes]], opts: CleanOptions,
                report: SkipReport, limit: int | None = None) -> Iterator[Email]:
    """Kept emails from a mail source path or an iterable of `(label, raw bytes)`, in input order.

    Reads at most `limit` items. `report` is updated as it goes, so `report.kept + report.total_skipped ==
    report.seen` holds after every yielded email and at the end, also when the caller stops early.
    """
    if isinstance(path_or_messages, (str, os.PathLike)):
        items: Iterable[tuple[str, bytes | str]] = iter_source_items(Path(path_or_messages), limit)
    else:
        items = _as_bytes(path_or_messages)
    for n, (label, raw) in enumerate(items):
        if limit is not None and n >= limit:
            break
        report.seen += 1
        result = raw if isinstance(raw, str) else parse_message(raw, label, opts)
        if isinstance(result, str):
            report.skip(result)
            continue
        report.kept += 1
        yield result


def iter_raw_messages(path: Path, limit: int | None = None, ignored: dict[str, int] | None = None
                      ) -> Iterator[tuple[str, bytes]]:
    """`(label, raw bytes)` for each message at `path` (mbox, Maildir, tree, CSV or one file), sorted order.

    At most `limit` source items are read. Items that cannot be messages (hidden or non-mail files,
    unreadable files, oversized messages, broken CSV rows) are not yielded; their reasons are counted in
    `ignored` when it is given.
    """
    for label, item in iter_source_items(path, limit):
        if isinstance(item, bytes):
            yield label, item
        elif ignored is not None:
            ignored[item] = ignored.get(item, 0) + 1
