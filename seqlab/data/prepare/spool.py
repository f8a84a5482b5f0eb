"""The spools of `prepare`: cleaned emails, and the text each one quotes, parked on disk between reading and
encoding.

`prepare` cannot encode an email when it reads it: the tokenizer is fitted on the train split, and the
split of an email is known only once every email's thread is known. So each kept email's id, source
label and training text go to a spool file as they are read (memory stays bounded), and the spool is read
back sequentially once for fitting a BPE tokenizer and once for encoding.

A record is binary, not JSON, because the byte tokenizer can then copy the UTF-8 text straight into the
token store without decoding it:

    <u4 len(id)> <u4 len(source)> <u4 len(text)>  id bytes  source bytes  text bytes      (all UTF-8)

The text is exactly `Email.text()` with lone surrogates replaced by U+FFFD (`tokenizer.clean_text`),
i.e. the bytes the byte tokenizer's `encode` would produce, so the fast path and `encode` agree.

The context spool (`ContextSpool`) holds, in the same order, the text each email quotes (its context,
`seqlab.data.mail.quoted`; maybe empty): `<u4 len> bytes`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, NamedTuple

from seqlab.data.mail.records import Email
from seqlab.data.tokenizer import clean_text
from seqlab.durable import StreamFile
from seqlab.private_files import private_opener

SPOOL_FILE = "emails.spool"  # in the staging folder, removed before it is published
CONTEXT_SPOOL_FILE = "contexts.spool"  # each kept email's quoted context, beside SPOOL_FILE
_HEADER = struct.Struct("<III")
_LEN = struct.Struct("<I")  # a context spool record's length
_BUFFER_BYTES = 1 << 20


class SpoolRecord(NamedTuple):
    """One spooled email as read back: id and source label as text, the training text as UTF-8 bytes."""

    id: str
    source: str
    text: bytes


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: never from the reader, but a hand-made record may hold one
        return clean_text(text).encode("utf-8")


def pack_record(email: Email) -> bytes:
    """The spool record of one kept email (built in a worker process, written as is by the main one)."""
    ident, source, text = _utf8(email.id), _utf8(email.source), _utf8(email.text())
    return b"".join((_HEADER.pack(len(ident), len(source), len(text)), ident, source, text))


class SpoolWriter:
    """Append packed records to a spool file; a context manager that closes the file."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._f: BinaryIO = open(self.path, "wb", buffering=_BUFFER_BYTES, opener=private_opener)  # noqa: SIM115 - closed in close()
        self.records = 0

    def write(self, record: bytes) -> None:
        self._f.write(record)
        self.records += 1

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> SpoolWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def iter_spool(path: Path) -> Iterator[SpoolRecord]:
    """The records of a spool file in the order they were written."""
    size = _HEADER.size
    with open(path, "rb", buffering=_BUFFER_BYTES) as f:
        while True:
            head = f.read(size)
            if not head:
                return
            if len(head) != size:
                raise ValueError(f"{path} ends inside a record header")
            n_id, n_source, n_text = _HEADER.unpack(head)
            body = f.read(n_id + n_source + n_text)
            if len(body) != n_id + n_source + n_text:
                raise ValueError(f"{path} ends inside a record")
            yield SpoolRecord(body[:n_id].decode("utf-8"), body[n_id:n_id + n_source].decode("utf-8"),
                              body[n_id + n_source:])


class ContextSpool:
    """Each kept email's quoted context (UTF-8, maybe empty), in spool order: u4 length + bytes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._f = StreamFile(self.path, _BUFFER_BYTES)

    def write(self, text: bytes) -> None:
        self._f.write(_LEN.pack(len(text)) + text)

    def close(self) -> None:
        self._f.close()

    def abort(self) -> None:
        self._f.abort()


def iter_context_spool(path: Path) -> Iterator[bytes]:
    with open(path, "rb", buffering=_BUFFER_BYTES) as f:
        while head := f.read(_LEN.size):
            (n,) = _LEN.unpack(head)
            yield f.read(n)
