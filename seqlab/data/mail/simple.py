"""The stdlib feed parser's result for the common simple message, built without the feed parser.

Most mail (nearly all of Enron) is one text part under a block of well-formed header lines. For that,
`email.feedparser.FeedParser` does little but split lines, yet it costs about a third of `prepare`'s
parsing time (a generator and a regex per line). `simple_message` builds the same `EmailMessage` the
parser would for such a message: the same (name, value) pairs through the same
`policy.header_source_parse`, the same payload string. It answers None, and the full parser runs, for
anything else: a header line the parser would treat specially (an envelope "From " line, a line that
is neither `Name:` nor a continuation, a leading continuation, an empty name), no blank line after the
headers, and multipart or message/* content, whose parts the full parser must find.
"""

from __future__ import annotations

import re
from email.message import Message
from email.policy import EmailPolicy

# email.feedparser.headerRE accepts "From ", `[\041-\071\073-\176]*:` and a leading blank; this accepts
# only the cases the parser handles plainly: a non-empty field name then ":", or a continuation line.
_FIELD = re.compile(r"[\041-\071\073-\176]+:")


def simple_message(data: bytes, policy: EmailPolicy) -> Message | None:
    """The message `BytesParser(policy=policy).parsebytes(data)` gives, or None when it is not simple.

    `data` has "\\n" line ends only (reader._strip_envelope), as the parser's line splitting then agrees
    with `str.split("\\n")`.
    """
    text = data.decode("ascii", "surrogateescape")  # as BytesParser decodes
    end = text.find("\n\n")
    if end < 0:
        return None
    lines = text[:end].split("\n")
    if not _FIELD.match(lines[0]):
        return None
    msg = policy.message_factory(policy=policy)
    field: list[str] = []
    for line in lines:
        if line[:1] in (" ", "\t"):
            field.append(line + "\n")
            continue
        if not _FIELD.match(line) or line.startswith("From "):
            return None
        if field:
            msg.set_raw(*policy.header_source_parse(field))
        field = [line + "\n"]
    msg.set_raw(*policy.header_source_parse(field))
    if msg.get_content_maintype() in ("multipart", "message"):
        return None
    msg.set_payload(text[end + 2:])
    return msg
