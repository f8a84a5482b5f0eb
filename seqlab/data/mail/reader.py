"""Reading mail: raw messages from any supported source -> parsed, cleaned `Email` records + a skip report.

`read_emails` is the entry point the pipeline uses. It takes a path (mbox, Maildir, a tree of message
files such as the Enron `maildir/<user>/<folder>/<n>` layout, a CSV with a raw-message column, or one
message file; see `files.py`) or any iterable of `(label, raw bytes)` (e.g. generated mail), and
yields one `Email` per kept message. Every message seen is either kept or counted under a named reason:

    too_large, header_too_long, too_many_parts, too_deep, too_many_lines   caps against hostile input (mime.py)
    no_boundary      a multipart without a boundary parameter: its parts cannot be found
    not_mail         no mail header at all (a stray text or binary file)
    no_text_part     only attachments / non-text parts
    binary           the text part is mostly control bytes
    empty            neither a subject nor a body after cleaning
    unparseable      every parser failed (the stdlib with policy.default, compat32, then raw text)
    hidden_file, hidden_dir, not_mail_file, not_a_file, unreadable, csv_error, csv_short_row   (sources)
"""

from __future__ import annotations

import functools
import hashlib
import os
import quopri
from collections.abc import Iterable, Iterator
from email import policy
from email.message import Message
from email.parser import BytesParser
from email.policy import EmailPolicy
from email.utils import parsedate_to_datetime
from pathlib import Path

from seqlab.data.mail.clean import (  # noqa: F401  (re-exported: the public cleaning API lives here too)
    CleanOptions,
    clean_body,
    html_to_text,
    mask_pii,
    safe_text,
    strip_quotes,
    strip_signature,
)
from seqlab.data.mail.context import clean_and_context
from seqlab.data.mail.files import detect_source_kind, iter_raw_messages, iter_source_items  # noqa: F401
from seqlab.data.mail.mime import (
    MAX_DEPTH,
    MAX_HTML_CHARS,
    MAX_PARTS,
    MAX_SUBJECT_CHARS,
    MAX_TEXT_CHARS,
    decode_bytes,
    decode_header_text,
    looks_binary,
    parse_addresses,
    parse_msg_ids,
    prescan,
)
from seqlab.data.mail.records import Email, SkipReport
from seqlab.data.mail.simple import content_answer, simple_fields, simple_message

SKIP_REASONS = frozenset(
    "too_large header_too_long too_many_parts too_deep too_many_lines no_boundary not_mail no_text_part binary "
    "empty unparseable hidden_file hidden_dir not_mail_file not_a_file unreadable csv_error csv_short_row".split()
)
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
    alone fetches Content-Type several times per part): about 1 ms per ordinary message, which caps
    reading near 1 MB/s, and super-linear or RecursionError on hostile values. We decode the headers we
    use ourselves (mime.py); `get_content_type`, `get_param` and friends work on the raw text.
    """
    return policy.default.clone(header_factory=_RawHeader)


class _Skip(Exception):
    """Raised inside parsing to stop with a named skip reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------- bytes -> headers + body text


def _strip_envelope(raw: bytes) -> bytes:
    """Unify line endings to \\n and drop a leading mbox `From ` envelope line (SpamAssassin files have one)."""
    if b"\r" in raw:
        raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    raw = raw.lstrip(b"\n")
    if raw.startswith(b"From "):  # "From " with a space is never a header ("From:" is)
        nl = raw.find(b"\n")
        raw = b"" if nl < 0 else raw[nl + 1:]
    return raw


def _collect_headers(items: Iterable[tuple[str, object]]) -> dict[str, list[str]]:
    """Raw values of the headers we use, by lower-case name; also records that some mail header exists."""
    headers: dict[str, list[str]] = {}
    for name, value in items:
        key = str(name).strip().lower()
        if key in _WANTED:
            headers.setdefault(key, []).append(str(value))
        elif key in MAIL_HEADERS:
            headers.setdefault(key, [])
    return headers


def _part_text(part: Message) -> str | None:
    """Decoded text of a leaf part (transfer encoding by the stdlib, charset by us); None when binary."""
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return ""
    try:
        charset = part.get_content_charset()
    except (UnicodeError, LookupError, ValueError, TypeError):
        charset = None
    return None if looks_binary(payload, charset) else decode_bytes(payload, charset)


def _body_from_message(msg: Message, keep_nested: bool) -> str | None:
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
            raise _Skip("too_many_parts")
        if depth > MAX_DEPTH:
            raise _Skip("too_deep")
        ctype = part.get_content_type()
        if part.is_multipart():
            if ctype == "message/rfc822" and not keep_nested:
                continue
            children = part.get_payload()
            stack.extend((child, depth + 1) for child in reversed(children) if isinstance(child, Message))
            continue
        if ctype.startswith("multipart/"):
            raise _Skip("no_boundary")
        if part.get_content_disposition() == "attachment":
            continue
        if ctype in ("text/plain", "text/html"):
            text = _part_text(part)
            if text is None:
                binary += 1
            else:
                (plain if ctype == "text/plain" else html).append(text)
    if binary and not plain and not html:
        raise _Skip("binary")
    if plain:
        return "\n\n".join(plain)
    if html:
        return "\n\n".join(html_to_text(h[:MAX_HTML_CHARS]) for h in html)
    return None


def _raw_fallback(raw: bytes) -> tuple[dict[str, list[str]], str | None]:
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
        raise _Skip("binary")
    return _collect_headers(items), decode_bytes(body)


_UU = ("x-uuencode", "uuencode", "uue", "x-uue")
_FIRST = frozenset(("content-type", "content-transfer-encoding", "content-disposition"))


def _simple_headers(fields: list[tuple[str, str]]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """`_collect_headers(fields)`, and the first value of each _FIRST header (as `Message.get` finds it),
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


def _simple_parts(raw: bytes) -> tuple[dict[str, list[str]], str | None] | None:
    """`_collect_headers(msg.raw_items()), _body_from_message(msg, ...)` of the message the parser would
    build, for a simple message (simple.py) of one non-multipart part whose transfer encoding is none,
    7bit, 8bit, binary or quoted-printable, without building `msg`; None for any other message.

    Each step is the one `_body_from_message` takes on such a message (a single leaf, depth 0): the
    stdlib's content-type, disposition and charset answers for the header values (simple.content_answer),
    `get_payload(decode=True)`'s bytes (the payload as is, or `quopri.decodestring` of it), then
    `_part_text`'s binary test and decoding.
    """
    found = simple_fields(raw)
    if found is None:
        return None
    fields, payload = found
    headers, first = _simple_headers(fields)
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
        raise _Skip("binary")
    text = decode_bytes(payload, charset)
    return headers, (text if ctype == "text/plain" else html_to_text(text[:MAX_HTML_CHARS]))


def _parse_parts(raw: bytes, keep_nested: bool) -> tuple[dict[str, list[str]], str | None]:
    """Headers and body text: the stdlib parser with (raw-header) policy.default (or its result for a simple
    message, built directly: simple.py), then compat32, then raw text."""
    for pol in (read_policy(), policy.compat32):
        try:
            parts = _simple_parts(raw) if pol is not policy.compat32 else None
            if parts is not None:
                return parts
            simple = simple_message(raw, pol) if pol is not policy.compat32 else None
            msg = simple if simple is not None else BytesParser(policy=pol).parsebytes(raw)
            return _collect_headers(msg.raw_items()), _body_from_message(msg, keep_nested)
        except _Skip:
            raise
        except Exception:  # noqa: BLE001  any stdlib failure on hostile input means "try the next parser"
            continue
    return _raw_fallback(raw)


# ---------------------------------------------------------------- headers + text -> Email


def _cap(text: str) -> str:
    """At most MAX_TEXT_CHARS, cut at a line end, so cleaning cost stays bounded."""
    if len(text) <= MAX_TEXT_CHARS:
        return text
    cut = text.rfind("\n", 0, MAX_TEXT_CHARS)
    return text[: cut if cut > 0 else MAX_TEXT_CHARS]


def _date(values: list[str]) -> str | None:
    if not values:
        return None
    try:
        return parsedate_to_datetime(decode_header_text(values[0][:300])).isoformat()
    except Exception:  # noqa: BLE001  (ValueError, TypeError, IndexError, OverflowError on junk dates)
        return None


def _build(headers: dict[str, list[str]], body: str, raw: bytes, source: str, opts: CleanOptions) -> Email | str:
    def first(name: str) -> str:
        return headers.get(name, [""])[0] if headers.get(name) else ""

    senders = parse_addresses(first("from"))
    sender = senders[0] if senders else ""
    if opts.senders and sender.casefold() not in opts.senders:
        return "other_sender"
    if sender.casefold() in opts.exclude_senders:
        return "excluded_sender"
    subject = decode_header_text(first("subject")[: MAX_SUBJECT_CHARS * 8])[:MAX_SUBJECT_CHARS].rstrip()
    body, context = clean_and_context(_cap(body), opts)
    if opts.mask_pii:
        subject = mask_pii(subject)
    if not subject and not body:
        return "empty"
    ids = parse_msg_ids(first("message-id"), limit=1)
    message_id = ids[0] if ids else None
    reply = parse_msg_ids(first("in-reply-to"), limit=1)
    references = parse_msg_ids(" ".join(headers.get("references", [])))
    own_id = message_id or "sha256:" + hashlib.sha256(raw).hexdigest()
    recipients = parse_addresses(",".join(headers.get("to", []) + headers.get("cc", [])))
    return Email(
        id=own_id,
        thread=references[0] if references else (reply[0] if reply else own_id),
        subject=subject,
        body=body,
        sender=sender,
        recipients=recipients,
        date=_date(headers.get("date", [])),
        message_id=message_id,
        in_reply_to=reply[0] if reply else None,
        references=references,
        source=safe_text(source),
        context=context,
    )


def _parse(raw: bytes, source: str, opts: CleanOptions) -> Email | str:
    data = _strip_envelope(raw)
    if not data.strip():
        return "empty"
    reason = prescan(data)
    if reason:
        return reason
    headers, body = _parse_parts(data, keep_nested=opts.keep_quotes)
    if not headers:
        return "not_mail"
    if body is None:
        return "no_text_part"
    return _build(headers, body, raw, source, opts)


def parse_message(raw: bytes, source: str, opts: CleanOptions) -> Email | str:
    """One raw message -> a cleaned `Email`, or the name of the reason it is skipped. Never raises."""
    try:
        return _parse(raw, source, opts)
    except _Skip as skip:
        return skip.reason
    except Exception:  # noqa: BLE001  a corner of the stdlib we did not foresee must not stop a run
        return "unparseable"


# ---------------------------------------------------------------- the stream


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
