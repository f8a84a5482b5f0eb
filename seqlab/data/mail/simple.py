"""The stdlib feed parser's result for the common simple message, built without the feed parser.

Most mail (nearly all of Enron) is one text part under a block of well-formed header lines. For that,
`email.feedparser.FeedParser` does little but split lines, yet it cost about a third of `prepare`'s
parsing time (a generator and a regex per line). `simple_fields` gives what the parser would store for
such a message: the (name, value) pairs `policy.header_source_parse` makes of each header (as
`Message.raw_items()` returns them) and the payload bytes. `simple_message` builds the `EmailMessage`
itself from them; the reader uses the fields directly (extract.simple_parts), asking the stdlib's own
`get_content_type` / `get_content_charset` / `get_content_disposition` about a header value only once
per distinct value (`content_answer`: Enron has a handful of distinct Content-Type values).

Both answer None, and the full parser runs, for anything else: a header line the parser would treat
specially (an envelope "From " line, a line that is neither `Name:` nor a continuation, a leading
continuation, an empty name), no blank line after the headers, and (`simple_message`) multipart or
message/* content, whose parts the full parser must find.
"""

from __future__ import annotations

import functools
import re
from email.message import Message
from email.policy import EmailPolicy

# email.feedparser.headerRE accepts "From ", `[\041-\071\073-\176]*:` and a leading blank; this accepts
# only the cases the parser handles plainly: a non-empty field name then ":", or a continuation line.
_FIELD = r"[\041-\071\073-\176]+:"
# A header block of such lines, the first one a field (an envelope "From " line never matches: the name
# cannot hold a blank). Linear: each line is one alternative followed by [^\n]*.
_BLOCK = re.compile(rf"{_FIELD}[^\n]*(?:\n(?:{_FIELD}|[ \t])[^\n]*)*")
_FIELD_BREAK = re.compile(r"\n(?![ \t])")  # where a new field starts

Fields = list[tuple[str, str]]


def simple_fields(data: bytes) -> tuple[Fields, bytes] | None:
    """(header pairs as `raw_items()` gives them, payload bytes) of `BytesParser().parsebytes(data)`, or
    None when the header block is not simple (see the module docstring; the content type is not looked at).

    `data` has "\\n" line ends only (extract.strip_envelope), as the parser's line splitting then agrees
    with `str.split("\\n")`. A value is `header_source_parse`'s: the first line's value without leading
    blanks, then each continuation line, joined by "\\n". The payload as bytes is what
    `get_payload(decode=True)` starts from: the bytes after the blank line.
    """
    end = data.find(b"\n\n")
    if end < 0:
        return None
    head = data[:end].decode("ascii", "surrogateescape")  # as BytesParser decodes
    if _BLOCK.fullmatch(head) is None:
        return None
    fields: Fields = []
    for field in _FIELD_BREAK.split(head):  # a field: its first line and its continuation lines
        name, value = field.split(":", 1)
        fields.append((name, value.lstrip(" \t")))  # stops at the first line's end: "\n" is not stripped
    return fields, data[end + 2:]


def simple_message(data: bytes, policy: EmailPolicy) -> Message | None:
    """The message `BytesParser(policy=policy).parsebytes(data)` gives, or None when it is not simple."""
    found = simple_fields(data)
    if found is None:
        return None
    fields, payload = found
    msg = policy.message_factory(policy=policy)
    for name, value in fields:
        msg.set_raw(name, value)
    if msg.get_content_maintype() in ("multipart", "message"):
        return None
    msg.set_payload(payload.decode("ascii", "surrogateescape"))
    return msg


CACHED_VALUE_CHARS = 256  # longer values (rare, hostile) are asked about directly: the cache stays small


def content_answer(policy: EmailPolicy, name: str, value: str | None, question: str) -> str | None:
    """`Message.<question>()` (get_content_type, get_content_charset, get_content_disposition) of a
    message whose first `name` header has the raw `value` (absent when None): the stdlib's own answer,
    which depends on nothing else, asked once per distinct short value. Exceptions propagate."""
    if value is not None and len(value) > CACHED_VALUE_CHARS:
        return _ask(policy, name, value, question)
    return _cached_answer(policy, name, value, question)


def _ask(policy: EmailPolicy, name: str, value: str | None, question: str) -> str | None:
    msg = policy.message_factory(policy=policy)
    if value is not None:
        msg.set_raw(name, value)
    return getattr(msg, question)()


_cached_answer = functools.lru_cache(maxsize=256)(_ask)  # at most 256 values of 256 characters
