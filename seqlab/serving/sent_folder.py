"""Learning from the person's Sent folder (`seqlab serve --learn --sent SOURCE`): every email they send, from
any client (a phone, a desktop program), and not only those the browser extension sees.

SOURCE is `imaps://USER@HOST[:PORT]/FOLDER` (read as `seqlab prepare` reads it: `mail/imap.py`, read-only) or
a local Sent mbox or Maildir (`prepare/ledger.py`'s `FileSource`). `open_sent_source` opens it when `serve`
starts, before it binds: the password is asked for then (or taken from SEQLAB_IMAP_PASSWORD or
--password-command), kept in memory only, and a refused login stops `serve` with one sentence.

`SentFolder` is a thread that reads the source every `every_s` seconds, only what came after its last read
(IMAP: the UIDs above the last one seen, the whole folder again after a UIDVALIDITY change; a file: its new
part), parses each message with prepare's reader (`parse_message`) and keeps what the person wrote through
`/v1/sent`'s intake (`personal.store_sent`: the same cleaning and caps), with the origin "imap:HOST/FOLDER"
or "file:PATH", then wakes the learner. An email already stored (the extension sent it first, or a folder
read again) is recognised by `personal.sent_digest` and not stored twice; nor does `/v1/sent` store again an
email this thread stored first (`kept`).

Only mail sent from now on is learned: at its first start on a source the thread takes the folder's newest
message as read (IMAP: UIDNEXT, nothing downloaded; a file: read through once, nothing kept), so thousands of
old emails are not poured into the store. Mail dated more than a day before that first start is never stored
either, so a folder read again whole (a UIDVALIDITY change, a compacted mbox) does not bring it back.

Where it is, is kept in RUN_DIR/personal/sent_folder.json (0600, replaced atomically, written after a whole
read): a restart reads on from there, and `seqlab forget` deletes it with the folder. A read that fails (the
server gone, a dropped connection) is retried with a growing pause and shown in /health's
`learning.sent_folder.error`; it never stops the server. Polling rather than IMAP IDLE: one short read every
half minute costs nothing, works the same for a file and a server, and needs no connection kept alive through
NATs and server timeouts; the learner waits for an idle moment anyway.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from seqlab.data.mail.clean import CleanOptions
from seqlab.data.mail.imap import ImapSource
from seqlab.data.mail.imap_auth import ImapOptions
from seqlab.data.mail.imap_url import parse_imap_url
from seqlab.data.mail.reader import parse_message
from seqlab.data.prepare.ledger import FileSource, TrackedSource
from seqlab.errors import UserError
from seqlab.serving.personal import Forgotten, NothingOwn, PersonalStore, StoreFull, TooLong, sent_digest, store_sent

__all__ = ["POSITION", "SentFolder", "SentSource", "open_sent_source"]

POSITION = "sent_folder.json"  # in RUN_DIR/personal
OLDER_S = 86400.0  # mail dated this long before the first start is old mail (a client's clock may be off)
MAX_BACKOFF_S = 600.0


@dataclass
class SentSource:
    """An opened Sent folder: what reads it, and the origin its emails are stored with (never a password)."""

    source: TrackedSource
    origin: str  # "imap:HOST/FOLDER" or "file:/absolute/path"

    def newest(self) -> dict[str, Any]:
        """The source's state with everything now in it taken as read."""
        if isinstance(self.source, ImapSource):
            return self.source.newest()
        try:
            for _ in self.source.items(None):  # a local file: read through once (only at a first start)
                pass
        except UserError:  # an empty Maildir (a new Sent folder): its state says so, which is all we need
            pass
        return self.source.state()

    def close(self) -> None:
        if isinstance(self.source, ImapSource):
            self.source.close()


def open_sent_source(text: str, options: ImapOptions | None = None) -> SentSource:
    """`--sent SOURCE` opened: an IMAP folder logged into now (the secret asked for once, kept in memory), or a
    local mbox or Maildir; `UserError` in one sentence otherwise."""
    if "://" in text:
        url = parse_imap_url(text)
        if len(url.folders) != 1:
            raise UserError(f"--sent reads one folder (the Sent folder), not {len(url.folders)}: {text}")
        source = ImapSource(url, options)
        host = f"[{url.host}]" if ":" in url.host else url.host
        return SentSource(source, f"imap:{host}:{url.port}/{url.folders[0]}")
    path = Path(text).expanduser()
    if not path.exists():
        raise UserError(f"--sent {text}: no such file or folder (give a Sent mbox, a Maildir, or imaps://...)")
    found = FileSource(path.resolve())
    if found.kind not in ("mbox", "maildir"):
        raise UserError(f"--sent {text} is not an mbox or a Maildir (it reads as {found.kind})")
    return SentSource(found, f"file:{path.resolve()}")


class SentFolder:
    """The thread that learns the Sent folder's new mail (module docstring). `describe()` is for /health."""

    def __init__(self, sent: SentSource, store: PersonalStore, notify: Callable[[], None], every_s: float,
                 max_body_bytes: int, reads_context: bool) -> None:
        self.sent, self.store, self.notify = sent, store, notify
        self.every_s, self.max_body_bytes, self.reads_context = every_s, max_body_bytes, reads_context
        self.last_poll: float | None = None
        self.error: str | None = None
        self.stored = 0
        self.duplicates = 0
        self.skipped = 0  # unreadable, empty, old, or nothing of the person's own
        self._position: dict[str, Any] | None = None
        self._kept: set[str] | None = None  # digests of the emails stored from this source
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="seqlab-sent-folder", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.sent.close()

    def kept(self) -> set[str]:
        """The `sent_digest`s of the emails stored from this source (read from the store once): `/v1/sent`
        stores none of them again, as this thread stores none of what the extension sent."""
        if self._kept is None:
            self._kept = {sent_digest(e.subject, e.body) for e in self.store.emails() if e.origin == self.sent.origin}
        return self._kept

    def describe(self) -> dict[str, Any]:
        return {"source": self.sent.origin, "every_s": self.every_s, "last_poll": self.last_poll,
                "stored": self.stored, "duplicates": self.duplicates, "skipped": self.skipped, "error": self.error}

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self.poll()
                self.error, failures = None, 0
            except Forgotten:
                return  # the person ran `seqlab forget`: nothing more is read or kept by this server
            except Exception as exc:  # noqa: BLE001 (reported by /health; the server goes on, and so do we)
                self.error = str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
                failures += 1
            pause = self.every_s if not failures else min(MAX_BACKOFF_S, self.every_s * 2 ** min(failures, 10))
            self._stop.wait(pause)

    def poll(self) -> None:
        """Read what came after the last read, keep the person's new emails, then record the new position."""
        position = self._position if self._position is not None else self._read_position()
        if position is None:  # the first start on this source: only what is sent from now on
            position = {"source": self.sent.origin, "since": time.time(), "state": self.sent.newest()}
            self._save(position)
        oldest = float(position["since"]) - OLDER_S
        stored: set[str] | None = None
        new = 0
        for label, raw in self.sent.source.items(position["state"]):
            if self._stop.is_set():
                return  # the position is not saved: the next start reads these again (and dedupes them)
            email = parse_message(raw, label, CleanOptions()) if isinstance(raw, bytes) else raw
            if isinstance(email, str) or _dated_before(email.date, oldest):
                self.skipped += 1
                continue
            if stored is None:  # read once per poll with new mail: /v1/sent may have added to it meanwhile
                stored = self.store.digests()
            context = email.context if self.reads_context and email.context else None
            try:
                _, digest = store_sent(self.store, email.subject, email.body, context, self.sent.origin,
                                       self.max_body_bytes, skip=stored)
            except (NothingOwn, TooLong):
                self.skipped += 1
                continue
            except StoreFull as exc:
                raise UserError(f"{exc}; new sent mail is not kept (`seqlab forget` empties it)") from None
            if digest is None:
                self.duplicates += 1
                continue
            stored.add(digest)
            self.kept().add(digest)
            self.stored += 1
            new += 1
        position = {**position, "state": self.sent.source.state()}
        self._save(position)
        self.last_poll = time.time()
        if new:
            self.notify()

    def _read_position(self) -> dict[str, Any] | None:
        try:
            found = json.loads((self.store.folder / POSITION).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # none yet, or damaged: start again from the newest mail
        if (not isinstance(found, dict) or found.get("source") != self.sent.origin
                or not isinstance(found.get("state"), dict) or not isinstance(found.get("since"), (int, float))):
            return None  # another source's (or unreadable): this one starts from its newest mail
        return found

    def _save(self, position: dict[str, Any]) -> None:
        self.store.write_file(POSITION, json.dumps(position, indent=1).encode("utf-8"))
        self._position = position


def _dated_before(date: str | None, oldest: float) -> bool:
    if not date:
        return False
    try:
        return datetime.fromisoformat(date).timestamp() < oldest
    except (ValueError, OverflowError, OSError):
        return False
