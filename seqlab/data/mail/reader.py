"""Reading mail: raw messages from any supported source -> parsed, cleaned `Email` records + a skip report.

`parse_message` turns one raw message (found on disk by `message_files.py`: mbox, Maildir, a tree of
message files such as the Enron `maildir/<user>/<folder>/<n>` layout, a CSV with a raw-message column, or one
message file; or generated) into one `Email`, or the reason it is skipped: `extract.py` takes the
message's headers and body text, this module cleans them into the record. `prepare` calls it in worker
processes (`seqlab.data.prepare.workers`); `original_text` reads the message a reply answers. Every message
seen is either kept or counted under a named reason:

    too_large, header_too_long, too_many_parts, too_deep, too_many_lines   caps against hostile input (mime.py)
    no_boundary      a multipart without a boundary parameter: its parts cannot be found
    not_mail         no mail header at all (a stray text or binary file)
    no_text_part     only attachments / non-text parts
    binary           the text part is mostly control bytes
    empty            neither a subject nor a body after cleaning
    unparseable      every parser failed (the stdlib with policy.default, compat32, then raw text)
    hidden_file, hidden_dir, not_mail_file, not_a_file, unreadable, csv_error, csv_short_row   (sources)
    deleted          Thunderbird flagged it deleted (X-Mozilla-Status 0x0008) and has not compacted the folder yet
"""

from __future__ import annotations

import hashlib
from email.utils import parsedate_to_datetime

from seqlab.data.mail.clean import (  # noqa: F401  (re-exported: the public cleaning API lives here too)
    CleanOptions,
    clean_body,
    mask_pii,
    safe_text,
    strip_quotes,
    strip_signature,
)
from seqlab.data.mail.extract import Skip, parse_parts, strip_envelope
from seqlab.data.mail.html_text import html_to_text  # noqa: F401  (re-exported with the cleaning API)
from seqlab.data.mail.message_files import detect_source_kind, iter_source_items  # noqa: F401
from seqlab.data.mail.mime import (
    MAX_SUBJECT_CHARS,
    MAX_TEXT_CHARS,
    decode_header_text,
    parse_addresses,
    parse_msg_ids,
    prescan,
)
from seqlab.data.mail.quoted import clean_and_context, keep_end
from seqlab.data.mail.records import Email

SKIP_REASONS = frozenset(
    "too_large header_too_long too_many_parts too_deep too_many_lines no_boundary not_mail no_text_part binary "
    "empty unparseable hidden_file hidden_dir not_mail_file not_a_file unreadable csv_error csv_short_row".split()
)


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
    data = strip_envelope(raw)
    if not data.strip():
        return "empty"
    reason = prescan(data)
    if reason:
        return reason
    headers, body = parse_parts(data, keep_nested=opts.keep_quotes)
    if not headers:
        return "not_mail"
    if body is None:
        return "no_text_part"
    return _build(headers, body, raw, source, opts)


def parse_message(raw: bytes, source: str, opts: CleanOptions) -> Email | str:
    """One raw message -> a cleaned `Email`, or the name of the reason it is skipped. Never raises."""
    try:
        return _parse(raw, source, opts)
    except Skip as skip:
        return skip.reason
    except Exception:  # noqa: BLE001  a corner of the stdlib we did not foresee must not stop a run
        return "unparseable"


def original_text(raw: bytes, opts: CleanOptions | None = None) -> str:
    """The text of a message being replied to, as a context: a mail message (headers, MIME) read by the
    mail reader, its body cleaned; anything else taken as plain text and cleaned like a body. Its end is
    kept, as in `prepare`."""
    opts = opts or CleanOptions()
    parsed = parse_message(raw, "reply-to", opts)
    if not isinstance(parsed, str) and parsed.body:
        return keep_end(parsed.body)
    return keep_end(clean_body(raw.decode("utf-8", errors="replace"), opts))
