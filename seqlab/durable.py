"""Durable file writes, shared by DATA_DIR (`seqlab.data.prepare`) and RUN_DIR (`seqlab.runs`), and the
server's private files.

- `atomic_write_bytes` / `atomic_write_text`: temporary file in the same directory, write, fsync,
  `os.replace`, fsync the directory; a crash leaves the old file or the new one, never a mix.
- `append_text`: one record (a log line) appended whole or not at all: a failed append is cut back.
- `StreamFile`: a sequential writer with a bounded buffer, fsynced on close (token files, emails.jsonl).
- A full disk (ENOSPC, or EDQUOT for a quota) is a `DiskFullError`, a `UserError` whose one sentence names
  the file and says "no space left": the command exits with code 2, not a traceback.
- Every file here is created 0600 (`seqlab.private_files.FILE_MODE`): what these files hold is mail or derived
  from it, readable by this user only from the first byte, whatever the umask.

Every byte goes through `os.write` on a raw descriptor, never a buffered file object, for two reasons:
a short write is handled here explicitly, and a test can simulate a full disk by patching `os.write`.

The crash tests' kill points (`seqlab.fault_injection`) sit at the named moments of every write here:
before, halfway through (`during`) and after.
"""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path

from seqlab.errors import UserError
from seqlab.fault_injection import file_point
from seqlab.private_files import FILE_MODE

__all__ = [
    "DiskFullError",
    "StreamFile",
    "append_text",
    "atomic_write_bytes",
    "atomic_write_text",
    "fsync_dir",
    "is_disk_full",
]

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})


class DiskFullError(UserError):
    """No space left on the device (or the quota is used up) while writing `path`."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"cannot write {path}: no space left on the device; free some space and run the "
                         "command again")
        self.path = Path(path)


def is_disk_full(exc: BaseException) -> bool:
    """True for the OSErrors that mean the disk (or the user's quota) is full."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


def fsync_dir(directory: Path) -> None:
    """Make renames and new entries in `directory` durable (POSIX; Windows cannot open a directory)."""
    if os.name == "nt":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """os.write until every byte is out: a write may be short (a signal, a nearly full disk)."""
    # Every view is released even when a write fails: a live view of a StreamFile's bytearray would make
    # the buffer impossible to clear (BufferError) while the error is being handled.
    with memoryview(data) as view:
        done = 0
        while done < len(view):
            with view[done:] as rest:
                done += os.write(fd, rest)


def atomic_write_bytes(path: Path, data: bytes, mode: int = FILE_MODE) -> None:
    """Replace `path` with `data` atomically; on any failure the old file is untouched and no temp is left.

    `mode` is what the file is created with, before the umask (the default 0o600: readable by this user only,
    from the first byte, never narrowed after the fact). A full disk raises `DiskFullError` naming `path`; any other
    OSError propagates as it is.
    """
    path = Path(path)
    file_point(path, "before")
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode)
        try:
            half = len(data) // 2
            with memoryview(data) as view:  # two halves (no copies): the "during" kill point lies between
                _write_all(fd, view[:half])
                file_point(path, "during")
                _write_all(fd, view[half:])
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if is_disk_full(exc):
            raise DiskFullError(path) from None
        raise
    fsync_dir(path.parent)
    file_point(path, "after")


def atomic_write_text(path: Path, text: str) -> None:
    """`atomic_write_bytes` of `text` encoded as UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))


def append_text(path: Path, text: str) -> None:
    """Append `text` (one record, e.g. a JSON line) to `path`, whole or not at all.

    A failed append (a full disk) is cut back to the old length, so a reader never meets half a record
    that a later append would glue to the next one. Not fsynced: a log line may be lost in a power cut,
    never torn by a failed write. A SIGKILL between the two halves can still tear the last line, which
    readers of such logs skip.
    """
    path = Path(path)
    data = text.encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0), FILE_MODE)
    try:
        size = os.fstat(fd).st_size
        try:
            half = len(data) // 2
            _write_all(fd, data[:half])
            file_point(path, "during")
            _write_all(fd, data[half:])
        except BaseException as exc:
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass  # the cut is a courtesy to readers; the error below is what matters
            if is_disk_full(exc):
                raise DiskFullError(path) from None
            raise
    finally:
        os.close(fd)


class StreamFile:
    """Write a new file sequentially through a bounded buffer; `close()` flushes and fsyncs.

    The caller decides what the file is for (usually a temporary name it renames on success); `abort()`
    closes without flushing. A full disk raises `DiskFullError` naming `shown` (default: the path).
    """

    def __init__(self, path: Path, buffer_bytes: int = 1 << 20, shown: Path | None = None) -> None:
        self.path = Path(path)
        self.shown = Path(shown) if shown is not None else self.path
        self._limit = buffer_bytes
        self._buf = bytearray()
        self._fd: int | None = None
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0),
                               FILE_MODE)
        except OSError as exc:
            if is_disk_full(exc):
                raise DiskFullError(self.shown) from None
            raise

    def write(self, data: bytes) -> None:
        """Buffer `data`; the buffer goes to disk whenever it holds `buffer_bytes` or more."""
        self._buf += data
        if len(self._buf) >= self._limit:
            self.flush()

    def flush(self) -> None:
        """Write the buffer out (no fsync)."""
        if self._fd is None:
            raise ValueError(f"{self.path} is already closed")
        try:
            _write_all(self._fd, self._buf)
        except OSError as exc:
            if is_disk_full(exc):
                raise DiskFullError(self.shown) from None
            raise
        self._buf.clear()

    def close(self) -> None:
        """Flush, fsync and close (idempotent)."""
        if self._fd is None:
            return
        self.flush()
        file_point(self.shown, "during")
        try:
            os.fsync(self._fd)
        except OSError as exc:
            if is_disk_full(exc):  # some file systems report a full disk only when the data is synced
                raise DiskFullError(self.shown) from None
            raise
        finally:
            self.abort()

    def abort(self) -> None:
        """Close without writing what is still buffered (idempotent)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self._buf.clear()
            os.close(fd)
