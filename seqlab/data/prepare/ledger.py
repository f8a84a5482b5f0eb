"""What `prepare` read of each source, so that `prepare --update` reads only what came after: `sources.json`.

A tracked source is anything with these two methods (the `TrackedSource` protocol):

    items(since: dict | None) -> Iterator[Item]   the source's messages as (label, raw bytes | skip reason),
                                                   leaving out what `since` (an earlier `state()`) says was
                                                   read; None reads everything
    state() -> dict                                once `items` is used up: JSON-able, what has now been read
                                                   (the `since` of the next update)

`prepare` records each source's `state()` in DATA_DIR/sources.json under the source's name (an absolute path
for a local one; the URL for a remote one, never a password), and `prepare --update` hands it back as
`since`. A source that cannot say what it read (the generated corpus) is read whole each time: dedupe
against the DATA_DIR drops what it already holds. `since` is only a saving: whatever a source reads again
is dropped as held mail, so a source may always answer a `since` it cannot use by reading everything.

Besides `FileSource` below, `mail/imap.py`'s `ImapSource` (per folder its UIDVALIDITY and highest UID) and
`mail/thunderbird.py`'s profile items (per folder as an mbox, less the status headers Thunderbird rewrites)
implement it; `tracked_source` finds them among what `resolve_source` returns.

`FileSource`, the local mail files (`message_files.py`'s layouts), tracks:

- an mbox: its size, mtime, message count, and digests of its first and last 4 KiB read. Unchanged: nothing
  is read. Grown with its old bytes in place (the head and the last 4 KiB before the old end as they were,
  the old end after a blank line and the new bytes opening with an envelope line: what appending to an
  mbox does): only the new bytes are read, their labels numbered on from the old count. Anything else
  (compacted, edited, shrunk): read again whole.
- a CSV or one message file: size and mtime; changed, read again whole.
- a tree of message files: each file's size and mtime (about 60 bytes a file in sources.json); new or
  changed files are read, and a skipped entry (a hidden file) is counted once.
- a Maildir: the key of each message (a Maildir never rewrites a message; a flag change renames the file
  under the same key), so only new keys are read.

Every stamp is taken before the bytes are read, and an mbox is read only up to the size stamped, so mail
that arrives during a prepare is read by the next update rather than lost.
"""

from __future__ import annotations

import hashlib
import json
import mailbox
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Protocol, runtime_checkable

from seqlab.data.mail.mbox import is_envelope, split_mbox
from seqlab.data.mail.message_files import (
    _iter_csv,
    _iter_file,
    _read_tree_file,
    _walk,
    detect_source_kind,
    maildir_items,
)
from seqlab.data.mail.mime import MAX_MESSAGE_BYTES
from seqlab.durable import atomic_write_text
from seqlab.errors import UserError

__all__ = ["LEDGER_FILE", "FileSource", "TrackedSource", "read_ledger", "source_name", "tracked_source",
           "write_ledger"]

LEDGER_FILE = "sources.json"
_EDGE = 4096  # bytes of an mbox's head and of the end of its old part that must be unchanged for a tail read

Item = tuple[str, "bytes | str"]


@runtime_checkable
class TrackedSource(Protocol):
    """A mail source that says what it has read and can read only what came after (module doc)."""

    def items(self, since: dict[str, Any] | None) -> Iterator[Item]: ...

    def state(self) -> dict[str, Any]: ...


def tracked_source(messages: object) -> TrackedSource | None:
    """What `resolve_source` gave as a `TrackedSource`: itself when it is one, a `FileSource` for a local path,
    None for a stream that cannot say what it read (the generated corpus)."""
    if isinstance(messages, TrackedSource):
        return messages
    if isinstance(messages, Path):
        return FileSource(messages)
    return None


def source_name(source: str | Path) -> str:
    """The key of a source in sources.json: a local path made absolute, anything else (a URL, a named corpus)
    as given."""
    text = str(source)
    path = os.path.expanduser(text)
    return os.path.abspath(path) if "://" not in text and os.path.exists(path) else text


def read_ledger(data_dir: Path) -> dict[str, dict[str, Any]]:
    """sources.json of a DATA_DIR: {source name: state}; a damaged file is a UserError."""
    path = Path(data_dir) / LEDGER_FILE
    try:
        ledger = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"--update {data_dir} holds no {LEDGER_FILE} (it was prepared before `prepare --update` "
                        "existed); prepare it once more without --update.") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise UserError(f"{path} cannot be read ({exc}); prepare the folder again without --update.") from None
    sources = ledger.get("sources") if isinstance(ledger, dict) else None
    if not isinstance(sources, dict) or not all(isinstance(v, dict) for v in sources.values()):
        raise UserError(f"{path} does not list sources as `prepare` writes them; prepare the folder again "
                        "without --update.")
    return sources


def write_ledger(folder: Path, sources: dict[str, dict[str, Any]]) -> None:
    atomic_write_text(Path(folder) / LEDGER_FILE, json.dumps({"version": 1, "sources": sources}, indent=1,
                                                             sort_keys=True) + "\n")


def _stamp(path: str | Path) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


class _Bounded:
    """A binary file read from `start` up to `end` only (the size stamped before reading)."""

    def __init__(self, f: BinaryIO, start: int, end: int) -> None:
        f.seek(start)
        self._f, self._left = f, max(0, end - start)

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        data = self._f.read(n) if n else b""
        self._left -= len(data)
        return data


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class FileSource:
    """A local mail path (mbox, Maildir, tree of message files, CSV, one message) as a `TrackedSource`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.kind = detect_source_kind(self.path)
        self._state: dict[str, Any] = {"kind": self.kind}

    def state(self) -> dict[str, Any]:
        return self._state

    def items(self, since: dict[str, Any] | None) -> Iterator[Item]:
        if since is not None and since.get("kind") != self.kind:
            since = None  # the path now holds another layout: read it whole
        reader = {"mbox": self._mbox, "maildir": self._maildir, "tree": self._tree}.get(self.kind, self._file)
        return reader(since)

    def _file(self, since: dict[str, Any] | None) -> Iterator[Item]:
        stamp = _stamp(self.path)
        self._state = {"kind": self.kind, "stamp": stamp}
        if since is not None and stamp is not None and since.get("stamp") == stamp:
            return
        yield from (_iter_csv(self.path) if self.kind == "csv" else _iter_file(self.path))

    def _mbox(self, since: dict[str, Any] | None) -> Iterator[Item]:
        label = str(self.path)
        with self.path.open("rb") as f:
            st = os.fstat(f.fileno())
            size = st.st_size
            head = f.read(_EDGE)
            f.seek(max(0, size - _EDGE))
            tail = f.read(min(size, _EDGE))
            start, first = 0, 0
            if since is not None:
                if since.get("stamp") == [size, st.st_mtime_ns]:
                    self._state = dict(since)
                    return
                start, first = self._tail_start(f, since, head)
            self._state = {"kind": "mbox", "stamp": [size, st.st_mtime_ns], "head": _digest(head[:_EDGE]),
                           "tail": _digest(tail), "ends_blank": tail.endswith((b"\n\n", b"\n\r\n")) or not size}
            count = first
            messages = split_mbox(_Bounded(f, start, size), MAX_MESSAGE_BYTES)
            if start == 0:  # labelled as message_files._iter_mbox labels them: `path` alone for a lone message
                one = next(messages, None)
                two = next(messages, None) if one is not None else None
                if one is None:
                    yield label, b""
                elif two is None:
                    yield label, one
                else:
                    yield f"{label}:0", one
                    yield f"{label}:1", two
                count = (one is not None) + (two is not None)
            for msg in messages:
                yield f"{label}:{count}", msg
                count += 1
            self._state["messages"] = count

    def _tail_start(self, f: BinaryIO, since: dict[str, Any], head: bytes) -> tuple[int, int]:
        """(offset, messages before it): where the new part of a grown mbox starts, (0, 0) to read it whole."""
        old = since.get("stamp")
        messages = since.get("messages")
        if not (isinstance(old, list) and len(old) == 2 and isinstance(old[0], int) and isinstance(messages, int)):
            return 0, 0
        old_size = old[0]
        f.seek(max(0, old_size - _EDGE))
        old_tail = f.read(min(old_size, _EDGE))
        new_part = f.read(1024)
        if (old_size <= 0 or not since.get("ends_blank") or _digest(head[:min(old_size, _EDGE)]) != since.get("head")
                or _digest(old_tail) != since.get("tail") or not is_envelope(new_part)):
            return 0, 0
        return old_size, messages

    def _tree(self, since: dict[str, Any] | None) -> Iterator[Item]:
        root = str(self.path)
        known = since.get("files", {}) if since is not None else {}
        files: dict[str, Any] = {}
        self._state = {"kind": "tree", "files": files}
        candidates = False
        for label, reason in _walk(self.path):
            rel = os.path.relpath(label, root)
            stamp = _stamp(label) if reason is None else reason
            files[rel] = stamp
            candidates = candidates or reason is None
            if rel in known and known[rel] == stamp and stamp is not None:
                continue
            if reason is not None:
                yield label, reason
            else:
                yield from _read_tree_file(label)
        if not candidates and since is None:
            raise UserError(f"{self.path} contains no mail files")

    def _maildir(self, since: dict[str, Any] | None) -> Iterator[Item]:
        known = set(since.get("keys", [])) if since is not None else set()
        keys: list[str] = []
        self._state = {"kind": "maildir", "keys": keys}
        md = mailbox.Maildir(self.path, factory=None, create=False)
        found = False
        for label, item in maildir_items(md, str(self.path), "", known, keys):
            found = True
            yield label, item
        if not found and since is None:
            raise UserError(f"{self.path} is a Maildir with no messages")


