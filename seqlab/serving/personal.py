"""The person's own writing, kept for `seqlab serve --learn`: the emails they sent, and the weights learned
from them.

    RUN_DIR/personal/            0700
        sent.jsonl               0600, one email a line: {"t", "subject", "body", "context"?, "origin"}; append-only
        learned.safetensors      0600, the model fine-tuned on them (`learner.Learner`)
        learned.json             0600, what those weights are: the base weights' digest, steps, passes per email
        sent_folder.json         0600, with --sent: how far the Sent folder was read (`sent_folder.py`)
        served.json              0600, the threshold and memory weight fitted on the sent emails (`recalibrate.py`)
    RUN_DIR/serve/learner.lock   0600, held (flock) by every learning server while it runs, and by `forget`

Each email is one `os.write` of a whole line followed by `fsync`, so a kill loses at most the email being
written and never tears an earlier one; a torn last line is skipped when read back. The store is bounded
(`max_emails`, `max_bytes`): past either it refuses (`StoreFull`) rather than grow. Without --learn the
server never creates this folder: it stores no text.

`forget` deletes the folder, and with it every trace of what was learned, and the event log of
RUN_DIR/serve; the server then serves the trained model again. Two things keep a learner from writing
back what it learned before a forget. The lock: a learning server holds it from start to exit, `forget`
takes it before it deletes, so `forget` refuses while any server learns (whatever server.json says, which
a second `serve` overwrites). The lock file lies beside the folder, never in it: deleting a locked file
would leave the next locker a new file of its own. And the epoch: a store holds its folder open, so a
folder deleted or replaced behind the lock's back (by hand, or on a file system where flock locks
nothing) is seen (`forgotten`), and the learner then drops what it learned instead of saving it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqlab.data.mail.clean import CleanOptions, clean_body
from seqlab.durable import atomic_write_bytes
from seqlab.errors import UserError

PERSONAL = "personal"
SENT = "sent.jsonl"
LEARNED = "learned.safetensors"
LEARNED_META = "learned.json"
LOCK = "learner.lock"  # in RUN_DIR/serve, beside personal/ (see the module docstring)
MAX_EMAILS = 20_000  # a few years of one person's sent mail
MAX_STORE_BYTES = 64 * 2**20


@dataclass(frozen=True)
class SentEmail:
    """One email the person finished, as the model reads it (subject, blank line, body) and what it answered;
    `origin` is who stored it ("person": the page or the token; else the extension's origin)."""

    subject: str
    body: str
    context: str | None = None
    t: float = 0.0
    origin: str | None = None

    def key(self) -> str:
        """A digest of this stored email (its time included: the same text sent twice is two emails), the key of
        its learning passes: a count stays with its email whatever is removed from the store before it."""
        text = json.dumps([self.t, self.subject, self.body, self.context], ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:32]


def own_words(body: str) -> str:
    """What the person wrote of an email body: the quoted original and the signature removed, by the cleaner
    `seqlab prepare` gives training mail (`clean_body` with its defaults)."""
    return clean_body(body, CleanOptions())


def sent_digest(subject: str, body: str) -> str:
    """Which email a stored one is, whoever stored it: a digest of its subject and cleaned body with every run of
    white space made one space (a Sent folder's copy may wrap lines the compose box did not). Unlike
    `SentEmail.key`, the time is not in it: the same email seen by the extension and in the Sent folder is one."""
    text = " ".join(subject.split()) + "\n" + " ".join(body.split())
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:32]


class NothingOwn(UserError):
    """Nothing of the person's own is left of a sent email once the quoted original and signature are removed."""


class TooLong(UserError):
    """What the person wrote of a sent email is over the store's cap of one body."""


def store_sent(store: PersonalStore, subject: str, body: str, context: str | None, origin: str,
               max_body_bytes: int, skip: set[str] | frozenset[str] = frozenset()) -> tuple[int, str | None]:
    """Keep one email the person sent, as every intake does (`/v1/sent`, the Sent folder): only its own words
    (`own_words`), at most `max_body_bytes` of them; (emails stored, its `sent_digest`), or (emails stored,
    None) without storing it when its digest is in `skip`. `NothingOwn`, `TooLong`, and the store's
    `StoreFull` and `Forgotten`, each with nothing stored."""
    own = own_words(body)
    if not own.strip():
        raise NothingOwn("nothing is left of the body once the quoted original and the signature are removed")
    if len(own.encode("utf-8", "replace")) > max_body_bytes:
        raise TooLong(f"the body is over {max_body_bytes // 1024} KiB once the quoted original and the signature "
                      "are removed")
    digest = sent_digest(subject, own)
    if digest in skip:
        return len(store), None
    return store.append(subject, own, context, origin), digest


class StoreFull(UserError):
    """The store holds its most emails or bytes: nothing more is stored until `forget` empties it."""


class Forgotten(UserError):
    """The personal folder this store wrote to was deleted (or replaced) while the server ran."""


class PersonalStore:
    """The append-only store of sent emails in RUN_DIR/personal/sent.jsonl; safe to share between threads.

    The folder is held open from the first time it is seen (so its identity cannot be reused by a new one):
    `forgotten()` says whether the folder at the path is still that one, and `append` refuses once it is not."""

    def __init__(self, run_dir: Path | str, max_emails: int = MAX_EMAILS, max_bytes: int = MAX_STORE_BYTES) -> None:
        self.folder = Path(run_dir) / PERSONAL
        self.path = self.folder / SENT
        self.max_emails, self.max_bytes = max_emails, max_bytes
        self._lock = threading.Lock()
        self._count: int | None = None  # emails stored, read once
        self._dir_fd: int | None = None
        # told each email the moment it is stored (the server's memory of the person's writing)
        self.listeners: list[Callable[[SentEmail], None]] = []
        with self._lock:
            if self.folder.is_dir():
                self._hold()

    def _hold(self) -> None:
        if self._dir_fd is None:
            self._dir_fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)

    def forgotten(self) -> bool:
        """Whether the folder this store has seen was deleted or replaced since (False before it had one)."""
        fd = self._dir_fd
        if fd is None:
            return False
        held = os.fstat(fd)
        try:
            now = os.stat(self.folder)
        except FileNotFoundError:
            return True
        return (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino)

    def append(self, subject: str, body: str, context: str | None = None, origin: str | None = None) -> int:
        """Store one sent email durably (written whole and fsync'd before this returns), then tell the
        `listeners`; the emails stored. `StoreFull` past `max_emails` or `max_bytes`, `Forgotten` once the
        folder was deleted."""
        record: dict[str, Any] = {"t": time.time(), "subject": subject, "body": body}
        if context:
            record["context"] = context
        if origin:
            record["origin"] = origin
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8", "replace")
        with self._lock:
            if self.forgotten():
                raise Forgotten(f"{self.folder} was deleted while this server ran (seqlab forget); restart the "
                                "server to learn again")
            count = self._count if self._count is not None else len(self._read())
            size = self.path.stat().st_size if self.path.is_file() else 0
            if count >= self.max_emails or size + len(line) > self.max_bytes:
                raise StoreFull(f"the store of sent emails is full ({count} emails, {size / 2**20:.1f} MiB of at "
                                f"most {self.max_emails} and {self.max_bytes / 2**20:.0f} MiB)")
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._hold()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                torn = os.fstat(fd).st_size > 0 and not _ends_with_newline(self.path)
                data = b"\n" + line if torn else line  # a line torn by a kill stays alone
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            self._count = count + 1
        stored = SentEmail(subject, body, context, record["t"], origin)
        for listener in self.listeners:
            listener(stored)
        return count + 1

    def __len__(self) -> int:
        with self._lock:
            if self._count is None:
                self._count = len(self._read())
            return self._count

    def emails(self) -> list[SentEmail]:
        """Every stored email in the order sent (torn or foreign lines skipped)."""
        with self._lock:
            return self._read()

    def digests(self) -> set[str]:
        """The `sent_digest` of every stored email."""
        return {sent_digest(e.subject, e.body) for e in self.emails()}

    def write_file(self, name: str, data: bytes) -> None:
        """Replace folder/`name` (0600) atomically, creating the folder (0700) as `append` does; `Forgotten`
        once the folder was deleted (nothing is then written back)."""
        with self._lock:
            if self.forgotten():
                raise Forgotten(f"{self.folder} was deleted while this server ran (seqlab forget)")
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._hold()
            atomic_write_bytes(self.folder / name, data, mode=0o600)

    def close(self) -> None:
        with self._lock:
            if self._dir_fd is not None:
                os.close(self._dir_fd)
                self._dir_fd = None

    def _read(self) -> list[SentEmail]:
        if not self.path.is_file():
            return []
        out = []
        with open(self.path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    r = json.loads(line)
                    out.append(SentEmail(str(r["subject"]), str(r["body"]), r.get("context"), float(r.get("t", 0)),
                                         r.get("origin")))
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue
        return out


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, 2)
        return f.read(1) == b"\n"


class LearningElsewhere(UserError):
    """Another process holds the run's learning lock; `pid` is its process id when it wrote one."""

    def __init__(self, message: str, pid: int | None) -> None:
        super().__init__(message)
        self.pid = pid


class LearnerLock:
    """The run's learning lock, RUN_DIR/serve/learner.lock: an exclusive `flock` held by a learning server for
    as long as it runs (the OS drops it when the process ends, however it ends) and by `forget` while it
    deletes. The holder writes its pid into the file, so a refusal can name it."""

    def __init__(self, run_dir: Path | str) -> None:
        self.path = Path(run_dir) / "serve" / LOCK
        self._fd = -1

    def acquire(self) -> LearnerLock:
        """Take the lock now or raise `LearningElsewhere` (never waits)."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            pid = _pid_in(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise UserError(f"cannot lock {self.path}: {exc.strerror or exc}") from None
            who = f"process {pid}" if pid is not None else "another process"
            raise LearningElsewhere(f"{who} is learning from {self.path.parent.parent} (it holds {self.path})",
                                    pid) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the only descriptor of the open file drops the flock
            self._fd = -1

    @property
    def held(self) -> bool:
        return self._fd >= 0


def _pid_in(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode("ascii").strip())
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def forget(run_dir: Path | str, logs: tuple[str, ...] = ()) -> list[str]:
    """Delete RUN_DIR/personal (the sent emails and the learned weights) and the files `logs` names in
    RUN_DIR/serve (the event log), holding the learning lock meanwhile: `LearningElsewhere` while a server
    learns. The paths removed, relative to RUN_DIR."""
    run_dir = Path(run_dir)
    lock = LearnerLock(run_dir).acquire()
    try:
        removed = []
        folder = run_dir / PERSONAL
        if folder.exists():
            removed = [f"{PERSONAL}/{p.name}" for p in sorted(folder.iterdir())]
            shutil.rmtree(folder)
        for name in logs:
            path = run_dir / "serve" / name
            if path.exists():
                path.unlink()
                removed.append(f"serve/{name}")
        return removed
    finally:
        lock.release()
