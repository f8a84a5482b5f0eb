"""The cleaning and header-decoding functions as they were before their fast paths (regex scans
of the whole text, normalizing twice, no caches), kept as the reference the fast ones in
seqlab/data/mail/clean.py, quoted.py and mime.py are tested against (tests/test_fast_clean.py). Only the
code that changed is here; the patterns it uses are the package's own.
"""

from __future__ import annotations

import re

from seqlab.data.mail.clean import (
    _BLANK_RUN,
    _CONTROL,
    _CONTROL_BYTES,
    _CUT,
    _CUT_HINTS,
    _LINE_END_BLANKS,
    _SURROGATE,
    CleanOptions,
    _attribution_spans,
    _is_header_block,
    mask_pii,
    strip_signature,
)
from seqlab.data.mail.mime import (
    _ADDRESS,
    _ENCODED_WORD,
    _FOLD,
    _QUOTED_OR_COMMENT,
    _SPACES,
    _decode_word,
    undo_surrogateescape,
)
from seqlab.data.mail.quoted import _HEADER_LINE, _MARKER_LINE, keep_end

_QUOTED_LINE = re.compile(r"^[ \t]*>[^\n]*(?:\n|\Z)", re.MULTILINE)
_UNQUOTE = re.compile(r"^[ \t]*> ?", re.MULTILINE)


def safe_text(text: str) -> str:
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if text.isascii():
        data = text.encode("ascii")
        kept = data.translate(None, _CONTROL_BYTES)
        return text if len(kept) == len(data) else kept.decode("ascii")
    text = _CONTROL.sub("", text)
    return _SURROGATE.sub("\ufffd", text)


def normalize_text(text: str) -> str:
    text = safe_text(text)
    if "\ufeff" in text:
        text = text.replace("\ufeff", "")
    text = "\n".join(line.rstrip(_LINE_END_BLANKS) for line in text.split("\n"))
    if "\n\n\n" in text:
        text = _BLANK_RUN.sub("\n\n", text)
    return text.strip("\n")


def _cut_offset(text: str) -> int:
    for m in _CUT.finditer(text):
        if m.group("hdr") is None or _is_header_block(text, m.start()):
            return m.start()
    return len(text)


def strip_quotes(text: str) -> str:
    low = text.lower()
    if any(hint in low for hint in _CUT_HINTS):
        cut = _cut_offset(text)
        if cut < len(text):
            text = text[:cut].rstrip("\n")
    if "wrote:" in low:
        low = text.lower()
        pieces, pos = [], 0
        for start, end in _attribution_spans(text, low):
            if start >= pos:
                pieces.append(text[pos:start])
                pos = end
        pieces.append(text[pos:])
        text = "".join(pieces)
    return _QUOTED_LINE.sub("", text) if ">" in text else text


def clean_body(text: str, opts: CleanOptions) -> str:
    text = normalize_text(text)
    if not opts.keep_quotes:
        text = strip_quotes(text)
    if not opts.keep_signatures:
        text = strip_signature(text)
    text = normalize_text(text)
    if opts.mask_pii:
        text = mask_pii(text)
    return text


def _cut_block(text: str) -> str:
    low = text.lower()
    if not any(hint in low for hint in _CUT_HINTS):
        return ""
    cut = _cut_offset(text)
    if cut >= len(text):
        return ""
    pos = cut
    first = _MARKER_LINE.match(text, pos)
    if first is not None and not _HEADER_LINE.match(text, pos):
        pos = first.end()
    while True:
        m = _HEADER_LINE.match(text, pos)
        if m is None or m.end() == pos:
            break
        pos = m.end()
    return text[pos:]


def _quoted_lines(text: str) -> str:
    if ">" not in text:
        return ""
    lines = [m.group(0) for m in _QUOTED_LINE.finditer(text)]
    return _UNQUOTE.sub("", "".join(lines))


def quoted_context(body: str, opts: CleanOptions) -> str:
    text = normalize_text(body)
    quoted = _cut_block(text) or _quoted_lines(text)
    if not quoted.strip():
        return ""
    cleaned = clean_body(quoted, CleanOptions(keep_quotes=False, keep_signatures=False, mask_pii=opts.mask_pii))
    return keep_end(cleaned)


def decode_header_text(value: str) -> str:
    value = _FOLD.sub("", value)
    out: list[str] = []
    pos, last_was_word = 0, False
    for m in _ENCODED_WORD.finditer(value):
        gap = value[pos:m.start()]
        if gap and not (last_was_word and not gap.strip()):
            out.append(undo_surrogateescape(gap))
        decoded = _decode_word(m.group(1), m.group(2), m.group(3))
        out.append(m.group(0) if decoded is None else decoded)
        last_was_word, pos = True, m.end()
    out.append(undo_surrogateescape(value[pos:]))
    return _SPACES.sub(" ", safe_text("".join(out))).strip()


def parse_addresses(value: str) -> list[str]:
    text = _QUOTED_OR_COMMENT.sub(" ", _FOLD.sub("", undo_surrogateescape(value)))
    seen: dict[str, None] = {}
    for m in _ADDRESS.finditer(text):
        seen.setdefault(m.group(0).lower().strip("."), None)
    return list(seen)
