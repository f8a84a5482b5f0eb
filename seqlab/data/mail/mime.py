"""MIME-level helpers for reading mail: caps against hostile input, charsets, RFC 2047 headers, addresses.

The caps are checked on the raw bytes *before* the standard library parses anything (`prescan`), because
parts of `email` are super-linear on adversarial input: parameter parsing of a long `Content-Type` line
is quadratic, and the feed parser checks every line against every open multipart boundary, so deep
nesting multiplies the work. Everything after the prescan is linear in the (capped) message size.

Charset names seen in real mail are often wrong (`uft-8`, `iso-8859-8-i`, `cp-850`, `unknown-8bit`, or
`us-ascii` on 8-bit text); `decode_bytes` maps them through an alias table, guesses when the name is
useless, and never raises. Text leaving this module has gone through `clean.safe_text`, so it encodes
as UTF-8 (no lone surrogates).
"""

from __future__ import annotations

import base64
import binascii
import bisect
import codecs
import functools
import re

from seqlab.data.mail.clean import safe_text

# ---------------------------------------------------------------- caps (skip reason in brackets)

MAX_MESSAGE_BYTES = 2 * 1024 * 1024  # one raw message ["too_large"]
MAX_HEADER_BYTES = 256 * 1024  # the top-level header block ["header_too_long"]
MAX_HEADER_LINE = 64 * 1024  # one unfolded top-level header ["header_too_long"]
MAX_HEADER_LINES = 5000  # lines in the top-level header block; the stdlib parses each ["header_too_long"]
MAX_MIME_HEADER = 8 * 1024  # one Content-* header anywhere; stdlib parses these ["header_too_long"]
# The stdlib's parameter splitter costs about length x (semicolons + quotes) per header read; this bounds
# the sum over all Content-* headers of a message (far above what legitimate mail needs) ["header_too_long"].
MAX_MIME_HEADER_COST = 8_000_000
MAX_PARTS = 200  # MIME parts in one message ["too_many_parts"]
MAX_DEPTH = 20  # multipart nesting depth ["too_deep"]
MAX_TEXT_CHARS = 200_000  # decoded body text kept for cleaning (longer text is cut at a line end)
MAX_HTML_CHARS = 100_000  # HTML converted to text (the scanner's work is per tag)
# The stdlib feed parser does about a microsecond of work per line and per open multipart level; this caps
# lines x (3 + nesting depth), i.e. a few hundred thousand lines at most ["too_many_lines"].
MAX_PARSE_WORK = 400_000
MAX_SUBJECT_CHARS = 1000
BINARY_FRACTION = 0.1  # a body with more control characters than this is "binary"

# The top-level header block as the stdlib feed parser sees it: lines that start like a header (`Name:`,
# an envelope `From `) or continue one, up to a blank line or any other line.
_HEADER_BLOCK = re.compile(rb"(?:(?:From |[!-9;-~]*:|[ \t])[^\n]*(?:\n|\Z))*")
_UNFOLDED_HEADER = re.compile(rb"\n(?![ \t])")
# Matched on "\n" + raw.lower(), so that case-sensitive literal prefixes make the scans fast.
_MIME_HEADER = re.compile(rb"\ncontent-[a-z-]{1,40}[ \t]*:[^\n]*(?:\n[ \t][^\n]*)*")
_BOUNDARY = re.compile(rb'boundary[ \t]*=[ \t]*"?([^"\s;]{1,200})')
# A line that could be a delimiter ("--b") or close ("--b--") of a boundary as _BOUNDARY reads them.
_DASH_LINE = re.compile(rb'\n--([^"\s;]{1,202})[ \t]*(?=\n|\Z)')


def _header_block_too_long(raw: bytes) -> bool:
    """The top-level header block breaks MAX_HEADER_BYTES, MAX_HEADER_LINES or MAX_HEADER_LINE."""
    end = _HEADER_BLOCK.match(raw).end()
    if end > MAX_HEADER_BYTES or raw.count(b"\n", 0, end) > MAX_HEADER_LINES:
        return True
    if end <= MAX_HEADER_LINE:  # no single header can be longer than the block
        return False
    return max(len(h) for h in _UNFOLDED_HEADER.split(raw[:end])) > MAX_HEADER_LINE


def _mime_headers_too_costly(low: bytes) -> bool:
    """A Content-* header over MAX_MIME_HEADER, or all of them together over MAX_MIME_HEADER_COST."""
    cost = 0
    for m in _MIME_HEADER.finditer(low):
        header = m.group(0)
        if len(header) > MAX_MIME_HEADER:
            return True
        cost += len(header) * (header.count(b";") + header.count(b'"') + 1)
        if cost > MAX_MIME_HEADER_COST:
            return True
    return False


def _boundary_lines(raw: bytes, names: set[bytes]) -> tuple[int, dict[bytes, list[int]]]:
    """One pass over the lines that start with "--": how many are delimiter or close lines of a declared
    boundary (as the stdlib matches them: "--" boundary, an optional "--", optional blanks), and the offsets
    of each boundary's close lines, in order."""
    delimiters = 0
    closes: dict[bytes, list[int]] = {}
    for m in _DASH_LINE.finditer(raw):
        token = m.group(1)
        closed = token[:-2] if token.endswith(b"--") else None
        if closed in names:
            closes.setdefault(closed, []).append(m.start())
        delimiters += token in names or closed in names
    return delimiters, closes


def _nesting_depth(raw: bytes, boundaries: list[tuple[int, bytes]], closes: dict[bytes, list[int]]) -> int:
    """Upper bound on multipart nesting: how many boundaries are open where each one is declared.

    A boundary is open from its declaration to its first close line after it (or the end when never closed).
    """
    spans = []
    for start, b in boundaries:
        ends = closes.get(b, [])
        i = bisect.bisect_left(ends, start)
        spans.append((start, ends[i] if i < len(ends) else len(raw)))
    return max((sum(1 for s, e in spans if s <= start < e) for start, _ in spans), default=0)


def _declared_boundaries(raw: bytes, low: bytes) -> list[tuple[int, bytes]] | None:
    """(offset, boundary) for each `boundary=` parameter in `raw`; None when there are over MAX_PARTS."""
    found: list[tuple[int, bytes]] = []
    for m in _BOUNDARY.finditer(low):
        if low[m.start() - 1:m.start()].isalnum():
            continue  # "xboundary=" is another parameter
        # `low` is one byte longer than `raw` (its leading "\n"); boundaries are case-sensitive, so take raw's.
        found.append((m.start() - 1, raw[m.start(1) - 1:m.end(1) - 1]))
        if len(found) > MAX_PARTS:
            return None
    return found


def prescan(raw: bytes) -> str | None:
    """A skip reason when `raw` (\\n line endings) breaks a cap, else None. Linear in len(raw)."""
    if len(raw) > MAX_MESSAGE_BYTES:
        return "too_large"
    if _header_block_too_long(raw):
        return "header_too_long"
    low = b"\n" + raw.lower()
    if _mime_headers_too_costly(low):
        return "header_too_long"
    boundaries = _declared_boundaries(raw, low) if b"boundary" in low else []
    if boundaries is None:
        return "too_many_parts"
    lines = raw.count(b"\n")
    if lines * 3 > MAX_PARSE_WORK:  # too many at any depth; decided first because the scan below is per line
        return "too_many_lines"
    many_dash_lines = raw.count(b"\n--") > 2 * MAX_PARTS  # cheap bounds first; then look at the lines
    if not many_dash_lines and len(boundaries) <= MAX_DEPTH:
        depth = len(boundaries)
    else:
        delimiters, closes = _boundary_lines(raw, {b for _, b in boundaries})
        if many_dash_lines and delimiters > MAX_PARTS + 2 * len(boundaries):
            return "too_many_parts"
        depth = len(boundaries) if len(boundaries) <= MAX_DEPTH else _nesting_depth(raw, boundaries, closes)
    if depth > MAX_DEPTH:
        return "too_deep"
    if lines * (3 + depth) > MAX_PARSE_WORK:
        return "too_many_lines"
    return None


# ---------------------------------------------------------------- charsets

CHARSET_ALIASES: dict[str, str | None] = {
    # broken or vendor names seen in real mail -> a Python codec; None means "unknown, guess"
    "uft-8": "utf-8", "utf8": "utf-8", "utf-8": "utf-8", "unicode-1-1-utf-8": "utf-8", "x-utf-8": "utf-8",
    "iso-8859-8-i": "iso-8859-8", "iso-8859-8-e": "iso-8859-8", "iso-8859-6-i": "iso-8859-6",
    "iso-8859-6-e": "iso-8859-6", "cp-850": "cp850", "cp-1252": "cp1252", "cp-1251": "cp1251",
    "ansi_x3.4-1968": "ascii", "ansi_x3.4-1986": "ascii", "us-ascii": "ascii", "ascii": "ascii", "us": "ascii",
    # Mail labelled Latin-1 is in practice Windows-1252 (HTML5 decodes it that way too).
    "iso-8859-1": "cp1252", "iso8859-1": "cp1252", "iso_8859-1": "cp1252", "latin1": "cp1252", "latin-1": "cp1252",
    "ks_c_5601-1987": "cp949", "ks_c_5601": "cp949", "euc-kr": "cp949", "gb2312": "gb18030", "gbk": "gb18030",
    "x-gbk": "gb18030", "shift-jis": "cp932", "shift_jis": "cp932", "x-sjis": "cp932", "sjis": "cp932",
    "windows-31j": "cp932", "x-mac-roman": "mac_roman", "macintosh": "mac_roman", "x-mac-cyrillic": "mac_cyrillic",
    "windows-874": "cp874", "tis-620": "cp874", "x-user-defined": "cp1252",
    "unknown-8bit": None, "x-unknown": None, "unknown": None, "default": None, "charset": None, "none": None,
    "x-unknown-8bit": None, "8bit": None, "binary": None,
}
# Codecs that exist in Python but are not text encodings, or can emit surrogates from escapes.
_NOT_TEXT_CODECS = frozenset(
    "base64 bz2 hex quopri rot-13 rot13 uu zlib idna punycode undefined unicode-escape raw-unicode-escape "
    "unicode-internal mbcs oem charmap string-escape escape".replace("-", "_").split()
)
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def normalize_charset(name: str | None) -> str | None:
    """A usable Python codec name for a MIME charset label, or None when it is missing or unknown."""
    if not name:
        return None
    if len(name) <= 64:  # the labels real mail uses: a few dozen, each looked up once
        return _normalize_charset_cached(name)
    return _normalize_charset(name)


def _normalize_charset(name: str) -> str | None:
    label = name.strip().strip("\"'").strip().lower()[:40]
    label = re.split(r"[\s;,]", label, maxsplit=1)[0] if label else label
    if label in CHARSET_ALIASES:
        return CHARSET_ALIASES[label]
    for candidate in (label, label.replace("_", "-"), label.removeprefix("x-"), label.replace("cp-", "cp")):
        try:
            info = codecs.lookup(candidate)
        except (LookupError, ValueError):
            continue
        if info.name.replace("-", "_") in _NOT_TEXT_CODECS:
            return None
        return info.name
    return None


_normalize_charset_cached = functools.lru_cache(maxsize=512)(_normalize_charset)


@functools.cache
def _cp1252_table() -> dict[int, str]:
    # surrogateescape turns each undecodable byte 0xXY into U+DCXY; map those back through Windows-1252.
    return {0xDC00 + b: bytes([b]).decode("cp1252", "replace") for b in range(0x80, 0x100)}


def utf8_or_cp1252(data: bytes) -> str:
    """UTF-8 where the bytes are valid UTF-8, Windows-1252 byte by byte where they are not.

    Mail with mixed encodings (a UTF-8 subject edited by a Latin-1 client) decodes readably this way.
    """
    return data.decode("utf-8", "surrogateescape").translate(_cp1252_table())


def _utf16_by_nuls(data: bytes) -> str | None:
    """"utf-16-le" or "utf-16-be" when the first 4 KiB have NULs at most odd (even) offsets and hardly any at
    the others, as UTF-16 text of mostly Latin letters has; else None. NULs at both is binary, not text."""
    sample = data[:4096]
    if len(sample) < 8:
        return None
    half = len(sample) // 2
    odd, even = sample[1::2].count(0), sample[0::2].count(0)
    if odd > 0.4 * half and even < 0.1 * half:
        return "utf-16-le"
    if even > 0.4 * half and odd < 0.1 * half:
        return "utf-16-be"
    return None


def _guess(data: bytes) -> str:
    """Decode bytes of unknown charset: UTF-16 by its NULs, else UTF-8 mixed with Windows-1252."""
    wide = _utf16_by_nuls(data)
    return data.decode(wide, "replace") if wide else utf8_or_cp1252(data)


def decode_bytes(data: bytes, charset: str | None = None) -> str:
    """Decode mail text with a declared (possibly wrong) charset; never raises; output is UTF-8-safe."""
    if data.startswith(codecs.BOM_UTF8):
        data, charset = data[3:], "utf-8"
    elif data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        charset = "utf-16"
    name = normalize_charset(charset)
    if name is None or name == "ascii":  # "us-ascii" on 8-bit text is a lie more often than not
        return safe_text(_guess(data))
    try:
        return safe_text(data.decode(name))
    except (UnicodeError, LookupError, ValueError, TypeError):
        pass
    if name == "utf-8":  # a lying label: the invalid bytes are almost always Windows-1252 / Latin-1
        return safe_text(utf8_or_cp1252(data))
    try:
        return safe_text(data.decode(name, "replace"))
    except (UnicodeError, LookupError, ValueError, TypeError):
        return safe_text(_guess(data))


_CONTROL_BYTES = bytes([*range(0x00, 0x09), 0x0B, *range(0x0E, 0x1B), *range(0x1C, 0x20), 0x7F])  # not ESC (ISO-2022)
_WIDE = ("utf_16", "utf_16_le", "utf_16_be", "utf_32", "utf_32_le", "utf_32_be")


def looks_binary(data: bytes, charset: str | None = None) -> bool:
    """True when a text part's bytes are mostly control bytes (and not UTF-16/32, which has NULs by design)."""
    sample = data[:65536]
    if not sample:
        return False
    name = (normalize_charset(charset) or "").replace("-", "_")
    if name in _WIDE or sample.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return False
    if _utf16_by_nuls(sample):
        return False  # undeclared UTF-16: `_guess` decodes it by the same test
    controls = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
    return controls > BINARY_FRACTION * len(sample)


def undo_surrogateescape(text: str) -> str:
    """Header text from a bytes parser carries raw 8-bit bytes as surrogates; decode those bytes properly."""
    if not _ESCAPED_BYTE.search(text):
        return safe_text(text)
    try:
        return decode_bytes(text.encode("utf-8", "surrogateescape"))
    except UnicodeError:
        return safe_text(text)


# ---------------------------------------------------------------- headers (RFC 2047, addresses, ids)

_ENCODED_WORD = re.compile(r"=\?([^?\s]{1,75})\?([bBqQ])\?([^?\s]{0,4000})\?=")
_FOLD = re.compile(r"\r?\n(?=[ \t])")
_SPACES = re.compile(r"\s+")


def _decode_word(charset: str, encoding: str, text: str) -> str | None:
    charset = charset.split("*", 1)[0]  # RFC 2231 language suffix: =?utf-8*en?Q?...?=
    try:
        if encoding in "bB":
            data = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
        else:
            data = binascii.a2b_qp(text.encode("ascii", "replace"), header=True)
    except (binascii.Error, ValueError):
        return None
    return decode_bytes(data, charset)


def decode_header_text(value: str) -> str:
    """Unfold a raw header value, decode RFC 2047 encoded words, collapse whitespace."""
    if value.isascii() and "=?" not in value:
        # No encoded word and no escaped byte: only safe_text and the whitespace collapse below have any
        # effect (unfolding removes only line breaks next to a blank, which the collapse merges anyway),
        # and str.split() splits at exactly the characters _SPACES matches (both use Unicode isspace).
        return " ".join(safe_text(value).split())
    value = _FOLD.sub("", value)
    out: list[str] = []
    pos, last_was_word = 0, False
    for m in _ENCODED_WORD.finditer(value):
        gap = value[pos:m.start()]
        if gap and not (last_was_word and not gap.strip()):  # whitespace between two words is dropped
            out.append(undo_surrogateescape(gap))
        decoded = _decode_word(m.group(1), m.group(2), m.group(3))
        out.append(m.group(0) if decoded is None else decoded)
        last_was_word, pos = True, m.end()
    out.append(undo_surrogateescape(value[pos:]))
    return _SPACES.sub(" ", safe_text("".join(out))).strip()


_QUOTED_OR_COMMENT = re.compile(r'"[^"\n]{0,500}"|\([^()\n]{0,500}\)')
_ADDRESS = re.compile(
    r"(?<![\w.!#$%&'*+/=?^`{|}~-])[\w!#$%&'*+/=?^`{|}~-][\w.!#$%&'*+/=?^`{|}~-]{0,63}"
    r"@[\w-]{1,63}(?:\.[\w-]{1,63}){0,10}"
)
_ANGLE_ID = re.compile(r"<([^<>\s]{1,500})>")


def parse_addresses(value: str) -> list[str]:
    """Lower-case addresses in an address header, in order, without duplicates (display names dropped)."""
    if len(value) <= 1000:  # senders and recipient lists repeat from message to message
        return list(_addresses_cached(value))
    return list(_addresses(value))


def _addresses(value: str) -> tuple[str, ...]:
    text = _QUOTED_OR_COMMENT.sub(" ", _FOLD.sub("", undo_surrogateescape(value)))
    seen: dict[str, None] = {}
    for m in _ADDRESS.finditer(text):
        seen.setdefault(m.group(0).lower().strip("."), None)
    return tuple(seen)


_addresses_cached = functools.lru_cache(maxsize=256)(_addresses)  # bounded, so a worker stays small


def parse_msg_ids(value: str, limit: int = 200) -> list[str]:
    """Message ids in a Message-ID / In-Reply-To / References value, without angle brackets."""
    value = safe_text(value)
    ids = [m.group(1) for m in _ANGLE_ID.finditer(value)]
    if not ids:  # some mailers omit the brackets
        ids = [tok.strip("<>") for tok in value.split() if "@" in tok and len(tok) <= 500]
    return [i for i in ids if i][:limit]
