"""What an IMAP server sends, read defensively: literals capped before imaplib allocates them, the replies of
`FETCH (UID RFC822.SIZE)` and `UID FETCH (UID BODY.PEEK[])` parsed into UIDs, sizes and bodies (anything else
is `Malformed`), the batches the bodies are fetched in, and server text made fit for an error message.

The IMAP source (`imap.py`) drives the conversation; this module only reads its replies.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterator

from seqlab.data.mail import mime

BATCH_UIDS = 250  # messages per UID FETCH: few round trips, and a batch's reply stays small
BATCH_BYTES = 8 << 20  # ... and about this many bytes of mail per batch (one large message may exceed it)
_UID = re.compile(rb"\bUID (\d+)")
_SIZE = re.compile(rb"\bRFC822\.SIZE (\d+)")
MAX_UID = 0xFFFFFFFF  # UIDs and RFC822.SIZE are 32-bit numbers (RFC 3501); kept in arrays of 64-bit ones


def fetch_cap() -> int:
    """The largest message fetched: twice the reader's cap, since RFC822.SIZE counts CRLF line ends; the cap
    itself is applied after they become LF. Read at call time: a test may lower the reader's cap."""
    return 2 * mime.MAX_MESSAGE_BYTES


class Malformed(Exception):
    """The server's reply cannot be what it claims to be."""


class CappedLiterals:
    """imaplib reads an announced literal with one read(size), allocating `size` bytes first: cap it."""

    def read(self, size: int) -> bytes:
        if size > fetch_cap() + 65536:  # the slack: a server may count a message's size a little differently
            raise Malformed(f"it announced a literal of {size} bytes, larger than any message asked for")
        return super().read(size)  # type: ignore[misc]


def uid_sizes(data: list, above: int) -> dict[int, int]:
    """The `UID -> RFC822.SIZE` pairs of a `FETCH lo:hi (UID RFC822.SIZE)` reply, UIDs above `above` only."""
    pairs: dict[int, int] = {}
    for line in data:
        if isinstance(line, tuple):
            raise Malformed("a literal where sizes were expected")
        uid, size = _UID.search(line or b""), _SIZE.search(line or b"")
        if uid and size and int(uid.group(1)) > above:
            if int(uid.group(1)) > MAX_UID or int(size.group(1)) > MAX_UID:
                raise Malformed("a UID or size beyond 32 bits")
            pairs[int(uid.group(1))] = int(size.group(1))
    return pairs


def bodies(data: list, uids: list[int]) -> dict[int, bytes]:
    """The message bodies of a `UID FETCH (UID BODY.PEEK[])` reply by UID; each must be one asked for, in
    `uids`, and carry its UID before or after its literal."""
    wanted, out = set(uids), {}
    uid: int | None = None
    body: bytes | None = None
    for item in data:
        if isinstance(item, tuple):
            if body is not None:
                raise Malformed("two literals in one FETCH response")
            head, body = item[0], item[1]
            m = _UID.search(head)
            uid = int(m.group(1)) if m else None
        elif body is not None and uid is None:
            m = _UID.search(item or b"")
            uid = int(m.group(1)) if m else None
        if body is not None and uid is not None:
            if uid not in wanted:
                raise Malformed(f"a message with UID {uid}, which was not asked for")
            out[uid] = body
            uid, body = None, None
        elif body is not None and not isinstance(item, tuple):
            raise Malformed("a message without its UID")
    if body is not None:
        raise Malformed("a message without its UID")
    return out


def batches(uids: array, sizes: array) -> Iterator[list[int]]:
    """Indices in runs of at most BATCH_UIDS messages and about BATCH_BYTES (sizes over the cap count 0)."""
    batch: list[int] = []
    total = 0
    for i in range(len(uids)):
        size = sizes[i] if sizes[i] <= fetch_cap() else 0
        if batch and (len(batch) >= BATCH_UIDS or total + size > BATCH_BYTES):
            yield batch
            batch, total = [], 0
        batch.append(i)
        total += size
    if batch:
        yield batch


class SaslOnce:
    """A SASL responder: the initial response, then an empty one (XOAUTH2 answers a failure with a challenge)."""

    def __init__(self, first: bytes) -> None:
        self.first: bytes | None = first

    def __call__(self, _challenge: bytes) -> bytes:
        out, self.first = self.first or b"", None
        return out


def quoted(text: str) -> str:
    """An IMAP quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def reply_text(exc_or_data: object) -> str:
    """What an imaplib exception or a reply's data says, as text (imaplib puts the server's bytes in args)."""
    if isinstance(exc_or_data, BaseException):
        parts = exc_or_data.args or (str(exc_or_data),)
    elif isinstance(exc_or_data, (list, tuple)):
        parts = tuple(exc_or_data)
    else:
        parts = (exc_or_data,)
    out = []
    for p in parts:
        if isinstance(p, bytes):
            out.append(p.decode("utf-8", "replace"))
        elif p is not None:
            out.append(str(p))
    text = " ".join(out)
    # imaplib wraps the server's bytes as "b'...'" inside its own messages
    return re.sub(r"b'(.*?)'", r"\1", text)
