"""Cleaning the text of one email: quoted replies, forwards, signatures, whitespace, PII (HTML to text is
`html_text.py`).

Every function here takes and returns `str` and does work linear in the length of its input: the
regular expressions have no nested or overlapping quantifiers that could backtrack catastrophically, and
the line loops touch each line a bounded number of times. Callers cap the text length before calling
(`mime.MAX_TEXT_CHARS`), so a hostile message costs a bounded amount of time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# ---------------------------------------------------------------- options


@dataclass(frozen=True)
class CleanOptions:
    """What `clean_body` removes. The defaults give the training text: the words the sender wrote."""

    keep_quotes: bool = False  # keep `>` lines, "Original Message" / forwarded blocks, "On ... wrote:"
    keep_signatures: bool = False  # keep the block after the last `-- ` line
    mask_pii: bool = False  # replace addresses, URLs and phone numbers with <EMAIL>, <URL>, <PHONE>
    # Whose mail is kept (`prepare --sender / --exclude-sender`): normalized From addresses, case-folded.
    # A message from another sender is a counted skip ("other_sender", "excluded_sender"), never silent.
    senders: frozenset[str] = frozenset()  # when non-empty, keep only mail from these
    exclude_senders: frozenset[str] = frozenset()  # never keep mail from these


# ---------------------------------------------------------------- whitespace and control characters

# C0 controls other than \t and \n, DEL and the C1 range: never useful in training text.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL_BYTES = bytes([*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F])
_C1_UTF8 = re.compile(b"\xc2[\x80-\x9f]")  # U+0080..U+009F in UTF-8
_LINE_END_BLANKS = " \t\u00a0\u3000"
_BLANK_RUN = re.compile(r"\n{3,}")


def safe_text(text: str) -> str:
    """Drop control characters and replace lone surrogates with U+FFFD, so the result encodes as UTF-8."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if text.isascii():  # the common case: byte-level deletion is much faster than a regex scan
        data = text.encode("ascii")
        kept = data.translate(None, _CONTROL_BYTES)
        return text if len(kept) == len(data) else kept.decode("ascii")
    try:
        data = text.encode("utf-8")  # succeeds exactly when there is no lone surrogate
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", _CONTROL.sub("", text))
    # In UTF-8 a C0 control or DEL is its own byte, and a C1 control is C2 80..C2 9F (C2 is only ever a
    # lead byte): two C-speed scans of the bytes say whether the regex has anything to remove.
    if len(data.translate(None, _CONTROL_BYTES)) == len(data) and not _C1_UTF8.search(data):
        return text
    return _CONTROL.sub("", text)


_BLANK_BEFORE_NEWLINE = tuple(c + "\n" for c in _LINE_END_BLANKS)
_BLANK_BEFORE_NEWLINE_UTF8 = tuple(n.encode("utf-8") for n in _BLANK_BEFORE_NEWLINE)


def _rstrip_lines(text: str) -> str:
    """`"\\n".join(line.rstrip(_LINE_END_BLANKS) for line in text.split("\\n"))`, touching only the lines
    that end in a blank (found by substring search; ordinary mail has none or a few)."""
    if not text.isascii():  # str.find is slow on 2- and 4-byte strings; UTF-8 bytes answer "none?" faster
        data = text.encode("utf-8", "surrogatepass")
        if not any(needle in data for needle in _BLANK_BEFORE_NEWLINE_UTF8):
            return text.rstrip(_LINE_END_BLANKS)
    ends = []  # offsets of the line breaks that follow a blank
    for needle in _BLANK_BEFORE_NEWLINE:
        i = text.find(needle)
        while i >= 0:
            ends.append(i + 1)
            i = text.find(needle, i + 2)
    if not ends:
        return text.rstrip(_LINE_END_BLANKS)  # only the last line can end in a blank
    pieces, pos = [], 0
    for nl in sorted(ends):
        pieces.append(text[pos:nl].rstrip(_LINE_END_BLANKS))  # stops at the line's start: "\\n" is no blank
        pos = nl
    pieces.append(text[pos:].rstrip(_LINE_END_BLANKS))
    return "".join(pieces)


def normalize_text(text: str) -> str:
    """Line endings to \\n, no trailing whitespace, runs of 2+ blank lines collapsed to one, ends stripped."""
    text = safe_text(text)
    if "\ufeff" in text:
        text = text.replace("\ufeff", "")
    text = _rstrip_lines(text)
    if "\n\n\n" in text:
        text = _BLANK_RUN.sub("\n\n", text)
    return text.strip("\n")


# ---------------------------------------------------------------- quotes and forwards

# A line from which everything below is someone else's text (Outlook, Enron/Lotus Notes, Gmail, Apple
# Mail), or the first line of an embedded reply header (`hdr`), which counts only when a block follows.
_CUT_LINE = (
    r"[ \t]*(?:-{2,}[ \t]*Original Message[ \t]*-{2,}"
    r"|-{3,}[ \t]*Forwarded by\b"
    r"|-{2,}[ \t]*Forwarded message[ \t]*-{2,}"
    r"|Begin forwarded message:"
    r"|_{20,}[ \t]*$"
    r"|(?P<hdr>(?:From|To):[ \t]))"
)
_CUT = re.compile("^" + _CUT_LINE, re.IGNORECASE | re.MULTILINE)
# The same after a line break: a pattern that starts with a literal is searched for at C speed, where "^"
# is tried at every position of the text. No match spans a line.
_CUT_AFTER_NEWLINE = re.compile("\n" + _CUT_LINE, re.IGNORECASE | re.MULTILINE)
_HEADERISH = re.compile(r"^[ \t]*(?:From|Sent|To|Cc|Subject|Date):[ \t]", re.IGNORECASE | re.MULTILINE)
_CUT_HINTS = ("original message", "forwarded", "_" * 20, "from:", "to:")
_QUOTED_RUN = re.compile(r"(?:[ \t]*>[^\n]*(?:\n|\Z))+")  # quoted lines, each with its line break
_QUOTED_RUN_AFTER_NEWLINE = re.compile(r"\n(?:[ \t]*>[^\n]*(?:\n|\Z))+")
# Case-sensitive on the lower-cased text when lower() keeps offsets (IGNORECASE forgoes the literal search), else
# the IGNORECASE twin on the text itself. No leading \b: it disables the fast literal search.
_WROTE_LOW = re.compile(r"wrote:[ \t]*$", re.MULTILINE)
_WROTE_ANYCASE = re.compile(r"wrote:[ \t]*$", re.IGNORECASE | re.MULTILINE)
_ON_START = re.compile(r"[ \t]*On\b", re.IGNORECASE)
_BLANK_LINES = re.compile(r"\n(?:[ \t]*\n)*")
_QUOTE_START = re.compile(r"[ \t]*>")
MAX_ATTRIBUTION_CHARS = 300  # a longer line ending in "wrote:" is prose, not an attribution


def _line_start(text: str, pos: int) -> int:
    return text.rfind("\n", 0, pos) + 1


def _is_header_block(text: str, start: int) -> bool:
    """At least two of the four lines after `start` are `From:/Sent:/To:/Cc:/Subject:/Date:` lines."""
    hits, pos = 0, start
    for _ in range(4):
        nl = text.find("\n", pos)
        if nl < 0:
            break
        pos = nl + 1
        hits += _HEADERISH.match(text, pos, min(len(text), pos + 40)) is not None
    return hits >= 2


def _cut_offset(text: str) -> int:
    """Offset of the first line from which the rest is forwarded or replied-to text (len(text) if none).

    The lines `_CUT.finditer` matches, in order: the first line, then every line after a "\\n"."""
    first = _CUT.match(text)
    if first is not None and (first.group("hdr") is None or _is_header_block(text, 0)):
        return 0
    for m in _CUT_AFTER_NEWLINE.finditer(text):
        start = m.start() + 1
        if m.group("hdr") is None or _is_header_block(text, start):
            return start
    return len(text)


def quoted_runs(text: str) -> list[tuple[int, int]]:
    """(start, end) of each run of consecutive lines of `text` that start with blanks and ">", with their
    line breaks: the lines `^[ \\t]*>[^\\n]*(?:\\n|\\Z)` matches in MULTILINE mode, merged where they
    touch. Found by literal-led searches (a run after the first line starts at a "\\n"), one match per run
    instead of trying "^" at every position and making a match per line."""
    runs = []
    first = _QUOTED_RUN.match(text)
    if first is not None:
        runs.append(first.span())
    runs += [(m.start() + 1, m.end()) for m in _QUOTED_RUN_AFTER_NEWLINE.finditer(text, first.end() if first else 0)]
    return runs


def cut_offset(text: str, low: str) -> int:
    """`_cut_offset(text)` when the lower-cased `low` holds one of its markers' hints, else len(text)."""
    if any(hint in low for hint in _CUT_HINTS):
        return _cut_offset(text)
    return len(text)


def _attribution_spans(text: str, low: str) -> list[tuple[int, int]]:
    """`... wrote:` lines (two when an `On ...` line wraps) followed by a quote or by nothing."""
    spans = []
    matches = _WROTE_LOW.finditer(low) if len(low) == len(text) else _WROTE_ANYCASE.finditer(text)
    for m in matches:
        if m.start() > 0 and (text[m.start() - 1].isalnum() or text[m.start() - 1] == "_"):
            continue  # "rewrote:" is not an attribution
        start = _line_start(text, m.start())
        if m.end() - start > MAX_ATTRIBUTION_CHARS:
            continue
        if start > 0:
            prev = _line_start(text, start - 1)
            if start - prev <= MAX_ATTRIBUTION_CHARS and _ON_START.match(text, prev):
                start = prev  # "On Mon, 1 Jan 2001, Bob Jones <bob@x.com>\nwrote:"
        after = m.end()
        blanks = _BLANK_LINES.match(text, after)
        nxt = blanks.end() if blanks else after
        if nxt >= len(text) or _QUOTE_START.match(text, nxt):
            spans.append((start, min(len(text), after + 1)))
    return spans


def strip_quotes(text: str, low: str | None = None, cut: int | None = None) -> str:
    """Remove quoted replies and forwarded text: `>` lines, `... wrote:` before a quote, and everything
    from an `-----Original Message-----`, `----- Forwarded by`, `Begin forwarded message:` or embedded
    reply-header block to the end. Regex scans only, so long inputs cost linear time at C speed.

    `low` (text.lower()) and `cut` (`cut_offset(text, low)`) may be given when already computed."""
    low = text.lower() if low is None else low  # only for the cheap `in` tests that let most bodies skip the scans
    cut = cut_offset(text, low) if cut is None else cut
    if cut < len(text):
        text = text[:cut].rstrip("\n")
    if "wrote:" in low:
        low = text.lower()  # the cut may have shortened the text
        pieces, pos = [], 0
        for start, end in _attribution_spans(text, low):
            if start >= pos:
                pieces.append(text[pos:start])
                pos = end
        pieces.append(text[pos:])
        text = "".join(pieces)
    if ">" not in text:
        return text
    pieces, pos = [], 0
    for start, end in quoted_runs(text):
        pieces.append(text[pos:start])
        pos = end
    pieces.append(text[pos:])
    return "".join(pieces)


# ---------------------------------------------------------------- signatures

MAX_SIGNATURE_LINES = 15  # a longer block after `-- ` is more likely content than a signature


def strip_signature(text: str) -> str:
    """Remove the block after the last `-- ` delimiter line when it is at most MAX_SIGNATURE_LINES long."""
    lines = text.rsplit("\n", MAX_SIGNATURE_LINES + 1)  # only the tail is looked at
    lowest = 1 if len(lines) == MAX_SIGNATURE_LINES + 2 else 0  # lines[0] is then the rest of the body
    for i in range(len(lines) - 1, lowest - 1, -1):
        if lines[i].rstrip() == "--":
            return "\n".join(lines[:i])
    return text


# ---------------------------------------------------------------- PII

# Each pattern can only start at a token boundary (lookbehind) and uses bounded or non-overlapping
# repeats, so a long run of address-like characters is scanned once, not once per start position.
_URL = re.compile(r"(?<![\w.])(?:(?:https?|ftp)://|www\.)[^\s<>\"'()\[\]{}]{1,2000}", re.IGNORECASE)
_URL_TAIL = ".,;:!?"
_EMAIL = re.compile(
    r"(?<![\w.!#$%&'*+/=?^`{|}~-])[\w!#$%&'*+/=?^`{|}~-](?:[\w.!#$%&'*+/=?^`{|}~-]{0,63})"
    r"@[^\W_](?:[\w-]{0,62})(?:\.[^\W_][\w-]{0,62}){1,8}(?![\w-])"
)
_PHONE = re.compile(
    r"(?<![\w+])(?:"
    r"\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,5}"  # international: +44 20 7946 0958, +1 (713) 555-0100
    r"|(?:1[ .-])?\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}"  # (713) 555-0100
    r"|(?:1[ .-])?\d{3}[ .-]\d{3}[ .-]\d{4}"  # 713-555-0100, 713.555.0100
    r")(?![\w])"
)


def _url_sub(m: re.Match[str]) -> str:
    url = m.group(0)
    tail = len(url) - len(url.rstrip(_URL_TAIL))  # "see http://x.org." keeps its full stop
    return "<URL>" + url[len(url) - tail:] if tail else "<URL>"


def mask_pii(text: str) -> str:
    """Replace URLs, email addresses and phone numbers with `<URL>`, `<EMAIL>` and `<PHONE>`."""
    if "://" in text or "www." in text.lower():
        text = _URL.sub(_url_sub, text)
    if "@" in text:
        text = _EMAIL.sub("<EMAIL>", text)
    return _PHONE.sub("<PHONE>", text)


# ---------------------------------------------------------------- the whole body


def clean_body(text: str, opts: CleanOptions) -> str:
    """Cleaned body: normalized whitespace, then quotes and signature stripped and PII masked as asked."""
    return clean_normalized(normalize_text(text), opts)


def clean_normalized(text: str, opts: CleanOptions, low: str | None = None, cut: int | None = None) -> str:
    """`clean_body` of text that is already `normalize_text`'s output (`low`, `cut`: see strip_quotes)."""
    if not opts.keep_quotes:
        text = strip_quotes(text, low, cut)
    if not opts.keep_signatures:
        text = strip_signature(text)
    # Both remove whole lines (a cut, attribution and quoted lines, a signature), so what is left is lines
    # of normalized text: of normalize_text only the blank-run collapse and the end strip can change it.
    if "\n\n\n" in text:
        text = _BLANK_RUN.sub("\n\n", text)
    text = text.strip("\n")
    if opts.mask_pii:
        text = mask_pii(text)
    return text
