"""A raw message's bytes -> the headers seqlab uses and its body text: the first half of reading mail.

`parse_parts` tries, in order: the simple-message path (`simple.py`: one text part, headers and payload
taken directly, the stdlib's own answers for content type, charset and disposition), the stdlib parser
with `read_policy()` (policy.default that leaves header values raw), compat32, and last a raw split at
the first blank line. The MIME walk (`body_from_message`) checks part count and depth as it goes and
takes text/plain parts, else HTML as text. A message that must be skipped raises `Skip(reason)`; the
reader (`reader.py`) turns the headers and text into an `Email`.
"""

from __future__ import annotations

import functools
import quopri
from collections.abc import Iterable
from email import policy
from email.message import Message
from email.parser import BytesParser
from email.policy import EmailPolicy

from seqlab.data.mail.html_text import html_to_text
from seqlab.data.mail.mime import MAX_DEPTH, MAX_HTML_CHARS, MAX_PARTS, decode_bytes, looks_binary
from seqlab.data.mail.simple import content_answer, simple_fields, simple_message

__all__ = ["MAIL_HEADERS", "Skip", "body_from_message", "collect_headers", "parse_parts", "read_policy",
           "simple_parts", "strip_envelope"]

# Headers whose presence makes a blob of bytes mail rather than a stray file.
MAIL_HEADERS = frozenset(
    "from to cc subject date message-id received return-path delivered-to sender reply-to in-reply-to "
    "references mime-version content-type x-from x-to".split()
)
_WANTED = frozenset(("from", "to", "cc", "subject", "date", "message-id", "in-reply-to", "references"))


class _RawHeader(str):
    """A header value as written (unfolded), with the `name` attribute the email package expects."""

    name: str
    defects: tuple = ()

    def __new__(cls, name: str, value: str) -> _RawHeader:
        header = super().__new__(cls, value)
        header.name = name
        return header


@functools.cache
def read_policy() -> EmailPolicy:
    """`policy.default` with one change: fetching a header returns its raw text instead of parsing it.

    The default header registry runs a recursive-descent parser on every header fetch (the feed parser
    alone fetches Content-Type several times per part): the largest cost of reading an ordinary message,
    and super-linear or RecursionError on hostile values. We decode the headers we
    use ourselves (mime.py); `get_content_type`, `get_param` and friends work on the raw text.
    """
    return policy.default.clone(header_factory=_RawHeader)


class Skip(Exception):
    """Raised inside parsing to stop with a named skip reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def strip_envelope(raw: bytes) -> bytes:
    """Unify line endings to \\n and drop a leading mbox `From ` envelope line (SpamAssassin files have one)."""
    if b"\r" in raw:
        raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    raw = raw.lstrip(b"\n")
    if raw.startswith(b"From "):  # "From " with a space is never a header ("From:" is)
        nl = raw.find(b"\n")
        raw = b"" if nl < 0 else raw[nl + 1:]
    return raw


def collect_headers(items: Iterable[tuple[str, object]]) -> dict[str, list[str]]:
    """Raw values of the headers we use, by lower-case name; also records that some mail header exists."""
    headers: dict[str, list[str]] = {}
    for name, value in items:
        key = str(name).strip().lower()
        if key in _WANTED:
            headers.setdefault(key, []).append(str(value))
        elif key in MAIL_HEADERS:
            headers.setdefault(key, [])
    return headers


def part_text(part: Message) -> str | None:
    """Decoded text of a leaf part (transfer encoding by the stdlib, charset by us); None when binary."""
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return ""
    try:
        charset = part.get_content_charset()
    except (UnicodeError, LookupError, ValueError, TypeError):
        charset = None
    return None if looks_binary(payload, charset) else decode_bytes(payload, charset)


def body_from_message(msg: Message, keep_nested: bool) -> str | None:
    """Text of the message: its text/plain parts, else its HTML parts as text; None when it has no text part.

    An explicit stack instead of `walk()` so that part count and depth are checked as we go; attachments,
    non-text parts and (unless `keep_nested`, i.e. quotes are kept) attached messages are skipped.
    """
    plain: list[str] = []
    html: list[str] = []
    binary = 0
    stack: list[tuple[Message, int]] = [(msg, 0)]
    count = 0
    while stack:
        part, depth = stack.pop()
        count += 1
        if count > MAX_PARTS:
            raise Skip("too_many_parts")
        if depth > MAX_DEPTH:
            raise Skip("too_deep")
        ctype = part.get_content_type()
        if part.is_multipart():
            if ctype == "message/rfc822" and not keep_nested:
                continue
            children = part.get_payload()
            stack.extend((child, depth + 1) for child in reversed(children) if isinstance(child, Message))
            continue
        if ctype.startswith("multipart/"):
            raise Skip("no_boundary")
        if part.get_content_disposition() == "attachment":
            continue
        if ctype in ("text/plain", "text/html"):
            text = part_text(part)
            if text is None:
                binary += 1
            else:
                (plain if ctype == "text/plain" else html).append(text)
    if binary and not plain and not html:
        raise Skip("binary")
    if plain:
        return "\n\n".join(plain)
    if html:
        return "\n\n".join(html_to_text(h[:MAX_HTML_CHARS]) for h in html)
    return None


def raw_fallback(raw: bytes) -> tuple[dict[str, list[str]], str | None]:
    """Headers and body without the email package: split at the first blank line, `Name: value` lines."""
    head, _, body = raw.partition(b"\n\n")
    items: list[tuple[str, str]] = []
    for line in head.decode("utf-8", "surrogateescape").split("\n"):
        if line[:1] in (" ", "\t") and items:
            items[-1] = (items[-1][0], items[-1][1] + "\n" + line)
        elif ":" in line:
            name, _, value = line.partition(":")
            items.append((name, value.strip()))
    if looks_binary(body):
        raise Skip("binary")
    return collect_headers(items), decode_bytes(body)


_UU = ("x-uuencode", "uuencode", "uue", "x-uue")
_FIRST = frozenset(("content-type", "content-transfer-encoding", "content-disposition"))


def simple_headers(fields: list[tuple[str, str]]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """`collect_headers(fields)`, and the first value of each _FIRST header (as `Message.get` finds it),
    in one pass. The names of simple fields hold no blanks, so `.strip()` would change none of them."""
    headers: dict[str, list[str]] = {}
    first: dict[str, str] = {}
    for name, value in fields:
        key = name.lower()
        if key in _WANTED:
            headers.setdefault(key, []).append(value)
        elif key in MAIL_HEADERS:
            headers.setdefault(key, [])
        if key in _FIRST and key not in first:
            first[key] = value
    return headers, first


def simple_parts(raw: bytes) -> tuple[dict[str, list[str]], str | None] | None:
    """`collect_headers(msg.raw_items()), body_from_message(msg, ...)` of the message the parser would
    build, for a simple message (simple.py) of one non-multipart part whose transfer encoding is none,
    7bit, 8bit, binary or quoted-printable, without building `msg`; None for any other message.

    Each step is the one `body_from_message` takes on such a message (a single leaf, depth 0): the
    stdlib's content-type, disposition and charset answers for the header values (simple.content_answer),
    `get_payload(decode=True)`'s bytes (the payload as is, or `quopri.decodestring` of it), then
    `part_text`'s binary test and decoding.
    """
    found = simple_fields(raw)
    if found is None:
        return None
    fields, payload = found
    headers, first = simple_headers(fields)
    pol = read_policy()
    content_type = first.get("content-type")
    ctype = content_answer(pol, "content-type", content_type, "get_content_type")
    if ctype.split("/")[0] in ("multipart", "message"):
        return None
    cte = first.get("content-transfer-encoding", "").replace("\n", "").lower()  # as `get` unfolds it
    if cte == "base64" or cte in _UU:
        return None  # decoded by the message itself (simple_message), with the stdlib's defect handling
    disposition = content_answer(pol, "content-disposition", first.get("content-disposition"),
                                 "get_content_disposition")
    if disposition == "attachment" or ctype not in ("text/plain", "text/html"):
        return headers, None
    if cte == "quoted-printable":
        payload = quopri.decodestring(payload)
    try:
        charset = content_answer(pol, "content-type", content_type, "get_content_charset")
    except (UnicodeError, LookupError, ValueError, TypeError):
        charset = None
    if looks_binary(payload, charset):
        raise Skip("binary")
    text = decode_bytes(payload, charset)
    return headers, (text if ctype == "text/plain" else html_to_text(text[:MAX_HTML_CHARS]))


def parse_parts(raw: bytes, keep_nested: bool) -> tuple[dict[str, list[str]], str | None]:
    """Headers and body text: the stdlib parser with (raw-header) policy.default (or its result for a simple
    message, built directly: simple.py), then compat32, then raw text."""
    for pol in (read_policy(), policy.compat32):
        try:
            parts = simple_parts(raw) if pol is not policy.compat32 else None
            if parts is not None:
                return parts
            simple = simple_message(raw, pol) if pol is not policy.compat32 else None
            msg = simple if simple is not None else BytesParser(policy=pol).parsebytes(raw)
            return collect_headers(msg.raw_items()), body_from_message(msg, keep_nested)
        except Skip:
            raise
        except Exception:  # noqa: BLE001  any stdlib failure on hostile input means "try the next parser"
            continue
    return raw_fallback(raw)
