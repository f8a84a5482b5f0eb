"""Finding raw messages on disk: mbox, Maildir, a tree of message files, a CSV with a message column, one file.

Everything streams: an mbox is split a block at a time (`mbox.py`), a CSV is read row by row, a tree is walked in sorted
order, and no message is held beyond MAX_MESSAGE_BYTES (a longer one is reported as "too_large" without
being kept in memory). Items are `(label, bytes)` for a message or `(label, reason)` for something that
was found but cannot be a message (a hidden file, an unreadable file, a broken CSV row); `prepare`
counts those as skipped so that no input disappears silently.
"""

from __future__ import annotations

import csv
import mailbox
import os
import re
import stat
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from pathlib import Path

from seqlab.data.mail.mbox import is_envelope, split_mbox
from seqlab.data.mail.mime import MAX_MESSAGE_BYTES
from seqlab.errors import UserError

Item = tuple[str, "bytes | str"]  # (label, raw message bytes or a skip reason)


class FoundItems:
    """Items a source found itself, as `iter_source_items` yields them: a str is a skip reason to count. (In a
    caller's own `(label, raw)` iterable a str is message text; `prepare.workers.source_items` tells them apart.)"""

    def __init__(self, items: Iterable[Item]) -> None:
        self._items = items

    def __iter__(self) -> Iterator[Item]:
        return iter(self._items)

CSV_FIELD_LIMIT = 16 * 1024 * 1024  # the csv module's default (128 KiB) is smaller than many messages
CSV_MESSAGE_COLUMNS = ("message", "raw", "email", "text")
NON_MAIL_SUFFIXES = frozenset(
    ".jpg .jpeg .png .gif .bmp .tif .tiff .ico .svg .webp .pdf .doc .docx .xls .xlsx .ppt .pptx .odt .zip .gz "
    ".tgz .bz2 .xz .7z .rar .tar .exe .dll .so .dylib .bin .pyc .py .js .css .json .xml .yaml .yml .csv .tsv "
    ".md .msf .db .sqlite .mp3 .mp4 .wav .avi .mov .msg .ini .lock .log .html .htm".split()
)
_MBOX_SUFFIXES = frozenset((".mbox", ".mbx"))


def detect_source_kind(path: Path) -> str:
    """'maildir', 'tree', 'mbox', 'csv' or 'message' for an existing path; UserError when it is missing."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path} does not exist")
    if path.is_dir():
        return "maildir" if (path / "cur").is_dir() and (path / "new").is_dir() else "tree"
    if not path.is_file():
        raise UserError(f"{path} is neither a regular file nor a directory")
    if path.suffix.lower() == ".csv":
        return "csv"
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError as exc:
        raise UserError(f"{path} cannot be read ({exc.strerror})") from None
    if path.suffix.lower() in _MBOX_SUFFIXES or is_envelope(head.lstrip(b"\r\n")):
        return "mbox"
    return "csv" if _looks_like_csv_header(head) else "message"


def _looks_like_csv_header(head: bytes) -> bool:
    """A first line such as `"file","message"`: comma-separated with a known message column name."""
    first = re.split(rb"[\r\n]", head, maxsplit=1)[0].decode("utf-8", "replace")
    if "," not in first:
        return False
    try:
        fields = next(csv.reader([first]), [])
    except csv.Error:
        return False
    return any(f.strip().lower() in CSV_MESSAGE_COLUMNS for f in fields)


# ---------------------------------------------------------------- mbox


def _iter_mbox(path: Path) -> Iterator[Item]:
    """Label a file's messages `path:i`, or plain `path` when it holds one message (a single saved email)."""
    with path.open("rb") as f:
        messages = split_mbox(f, MAX_MESSAGE_BYTES)  # read at call time: a test may lower the cap
        first = next(messages, None)
        if first is None:
            yield str(path), b""
            return
        second = next(messages, None)
        if second is None:
            yield str(path), first
            return
        yield f"{path}:0", first
        yield f"{path}:1", second
        for i, msg in enumerate(messages, start=2):
            yield f"{path}:{i}", msg


# ---------------------------------------------------------------- one file, a tree, a Maildir


def _iter_file(path: Path) -> Iterator[Item]:
    """One message file (an mbox-style envelope line at its start is dropped), or an mbox."""
    label = str(path)
    try:
        # One open and one read for an ordinary message (a tree of small files is read at the rate of
        # these system calls); the mbox test is `detect_source_kind`'s, on the same first 4096 bytes.
        with open(label, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            data = f.read(MAX_MESSAGE_BYTES + 1 if size <= MAX_MESSAGE_BYTES else 4096)
    except OSError:
        yield label, "unreadable"
        return
    yield from _file_items(path, label, size, data)


def _file_items(path: Path, label: str, size: int, data: bytes) -> Iterator[Item]:
    """The items of a file whose size and first bytes (all of it up to MAX_MESSAGE_BYTES + 1) were read."""
    suffix = path.suffix.lower()
    if suffix in _MBOX_SUFFIXES or (suffix != ".csv" and is_envelope(data[:4096].lstrip(b"\r\n"))):
        try:
            yield from _iter_mbox(path)
        except (OSError, UserError):
            yield label, "unreadable"
        return
    yield label, ("too_large" if size > MAX_MESSAGE_BYTES or len(data) > MAX_MESSAGE_BYTES else data)


def _suffix(name: str) -> str:
    """`PurePath(name).suffix`: from the last "." on, unless the name starts or ends with that "."."""
    i = name.rfind(".")
    return name[i:] if 0 < i < len(name) - 1 else ""


def _tree_entry_reason(name: str) -> str | None:
    if name.startswith("."):
        return "hidden_file"
    if _suffix(name).lower() in NON_MAIL_SUFFIXES:
        return "not_mail_file"
    return None


def _walk(root: Path) -> Iterator[tuple[str, str | None]]:
    """Every file under root in sorted order, as its path string (`str(Path(dir) / name)`), with its skip
    reason (None for a candidate message file). Strings, not Path objects: a tree of small files is read
    at a few microseconds a file, so building Paths would be a large part of it."""
    for dirpath, dirnames, filenames in os.walk(root):
        here = str(Path(dirpath))
        prefix = "" if here == "." else os.path.join(here, "")  # Path(".") / name is just name
        hidden = sorted(d for d in dirnames if d.startswith("."))
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if "cur" in dirnames and "new" in dirnames and "tmp" in dirnames:
            dirnames.remove("tmp")  # a Maildir's tmp/ holds deliveries in progress
        for d in hidden:
            yield prefix + d, "hidden_dir"
        for name in sorted(filenames):
            yield prefix + name, _tree_entry_reason(name)


def _read_tree_file(label: str) -> Iterator[Item]:
    """`_iter_file` of a file found in a tree, or "not_a_file" for what is not a regular file (a FIFO, a
    device, a socket, a broken link), with one open, one fstat and one read for an ordinary message.

    O_NONBLOCK so that opening a FIFO never waits for a writer (it has no effect on regular files); what
    `Path.is_file` would call no file is told apart from an unreadable file by asking it only when the
    open fails."""
    try:
        fd = os.open(label, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError:
        yield label, ("unreadable" if os.path.isfile(label) else "not_a_file")
        return
    try:
        size, data = _read_regular(fd)
    except OSError:
        size, data = 0, None
    finally:
        os.close(fd)
    if data is None:
        yield label, "unreadable"
    elif size < 0:
        yield label, "not_a_file"
    else:
        yield from _file_items(Path(label), label, size, data)


def _read_regular(fd: int) -> tuple[int, bytes]:
    """(size, what `open(...).read(n)` returns) of a regular file, n as `_iter_file` reads; (-1, b"") when the
    descriptor is not a regular file."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return -1, b""
    want = MAX_MESSAGE_BYTES + 1 if st.st_size <= MAX_MESSAGE_BYTES else 4096
    pieces, got = [], 0
    while got < want:  # BufferedReader.read(want): up to `want` bytes, to the end of the file
        piece = os.read(fd, min(want - got, max(st.st_size + 1 - got, 1 << 16)))
        if not piece:
            break
        pieces.append(piece)
        got += len(piece)
    return st.st_size, pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _iter_tree(root: Path) -> Iterator[Item]:
    if not any(reason is None for _, reason in _walk(root)):
        raise UserError(f"{root} contains no mail files")
    for label, reason in _walk(root):
        if reason is not None:
            yield label, reason
        else:
            yield from _read_tree_file(label)


def maildir_items(md: mailbox.Maildir, prefix: str, folder: str = "", known: AbstractSet[str] = frozenset(),
                  keys: list[str] | None = None) -> Iterator[Item]:
    """Every message of `md` and its subfolders, labelled `prefix:key`. A message whose `folder:key` (`folder`
    "" at the top) is in `known` was read before and is left out (`prepare --update`); `keys`, when given,
    collects every `folder:key` seen."""
    for key in sorted(md.keys()):
        label, rel = f"{prefix}:{key}", f"{folder}:{key}"
        if keys is not None:
            keys.append(rel)
        if rel in known:
            continue
        try:
            with md.get_file(key) as f:
                data = f.read(MAX_MESSAGE_BYTES + 1)
        except (OSError, KeyError):
            yield label, "unreadable"
            continue
        yield label, ("too_large" if len(data) > MAX_MESSAGE_BYTES else data)
    for name in sorted(md.list_folders()):
        yield from maildir_items(md.get_folder(name), f"{prefix}/.{name}", f"{folder}/.{name}", known, keys)


def _iter_maildir(path: Path) -> Iterator[Item]:
    # create=False: a mistyped path is an error, never a new empty mailbox.
    md = mailbox.Maildir(path, factory=None, create=False)
    items = maildir_items(md, str(path))
    first = next(items, None)
    if first is None:
        raise UserError(f"{path} is a Maildir with no messages")
    yield first
    yield from items


# ---------------------------------------------------------------- CSV


def _message_column(header: list[str], path: Path) -> int:
    names = [h.strip().lower() for h in header]
    for wanted in CSV_MESSAGE_COLUMNS:
        if wanted in names:
            return names.index(wanted)
    shown = ", ".join(repr(h) for h in header[:10]) or "none"
    raise UserError(f"{path} has no message column (looked for {', '.join(CSV_MESSAGE_COLUMNS)}; found {shown})")


def _iter_csv(path: Path) -> Iterator[Item]:
    """Rows of a CSV whose message column holds a whole raw message (the Kaggle Enron `file,message` layout)."""
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_LIMIT))
    # surrogateescape keeps the exact bytes of non-UTF-8 text so the mail parser sees the original message.
    with path.open("r", encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
        except csv.Error:
            header = None
        if not header:
            raise UserError(f"{path} is a CSV file without a header row")
        col = _message_column(header, path)
        i = 0
        while True:
            label = f"{path}:{i}"
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error:  # e.g. a field over the size limit; the reader resumes at the next line
                yield label, "csv_error"
            else:
                yield label, (row[col].encode("utf-8", "surrogateescape") if col < len(row) else "csv_short_row")
            i += 1


# ---------------------------------------------------------------- entry points

_READERS = {"mbox": _iter_mbox, "maildir": _iter_maildir, "tree": _iter_tree, "csv": _iter_csv, "message": _iter_file}


def iter_source_items(path: Path, limit: int | None = None) -> Iterator[Item]:
    """At most `limit` items `(label, bytes | skip reason)` from the mail source at `path`, in a fixed order."""
    path = Path(path)
    items = _READERS[detect_source_kind(path)](path)
    try:
        for n, item in enumerate(items):
            if limit is not None and n >= limit:
                return
            yield item
    finally:
        items.close()
