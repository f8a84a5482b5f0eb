"""Splitting an mbox into messages: blocks searched for "From ", not a Python step per line.

The rules (what `prepare` has always done; tests/slow_mbox.py keeps the line-by-line splitter they were
first written as, and tests/test_fast_mbox.py checks that both give the same messages):

- A message starts at an envelope line: one that starts with "From ", matches `ENVELOPE` within its
  first 512 bytes, and follows a blank line or the start of the file. The envelope line is dropped.
- A blank line is `\\r*\\n`, at most `piece` bytes long (the splitter first read lines in pieces of at most
  `piece` bytes: a longer line, and anything inside one, was never a line of its own). Blank lines
  before the first message are dropped; they stay at a message's end otherwise.
- A line that starts with ">"s and then "From " (mboxrd quoting, `ESCAPED_FROM` within its first `piece`
  bytes) loses one ">".
- An envelope line longer than `piece` bytes drops only its first `piece` bytes; the rest is content.
- A message longer than `max_bytes` (after unquoting) is the string "too_large", and is never held.
- Text before the first envelope, when it is not blank, is a message of its own.

Every special line has "From " at or after its start, so a block is searched with `bytes.find` for
"From ", each hit is checked for being at a line start (after any ">"s), and the text between hits is
copied as it is. Memory: a block (1 MiB), the unfinished last line carried to the next one, and at most
`max_bytes` of one message.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO

READ_PIECE = 64 * 1024  # the line-piece length the rules above are stated in
BLOCK = 1 << 20  # bytes read at a time
ENVELOPE_WINDOW = 512

# An mbox envelope line: "From sender Mon Jan  1 10:00:00 2001" and the variants mail tools write
# ("From - ...", a time zone before the year, "Mon, 1 Jan 2001 10:00:00 +0000"). Bounded repeats only,
# and nothing in it matches a newline, so a match never runs past its line.
ENVELOPE = re.compile(
    rb"From \S{1,300}[ \t]+(?:[A-Z][a-z]{2},?[ \t]+)?(?:[A-Z][a-z]{2}[ \t]+\d{1,2}|\d{1,2}[ \t]+[A-Z][a-z]{2})"
    rb"[ \t]+(?:\d{4}[ \t]+)?\d{1,2}:\d{2}"
)
ESCAPED_FROM = re.compile(rb">+From ")  # mboxrd quoting of body lines that start with "From "
_NL, _CR, _GT = 0x0A, 0x0D, 0x3E


def is_envelope(line: bytes) -> bool:
    """True for an mbox envelope line ("From sender date ..."), judged on its first 512 bytes."""
    return line.startswith(b"From ") and ENVELOPE.match(line, 0, ENVELOPE_WINDOW) is not None


class _Splitter:
    """The state carried between blocks: the message being collected and what the line before the
    current block's first line was."""

    def __init__(self, max_bytes: int, piece: int) -> None:
        self.max_bytes, self.piece = max_bytes, piece
        self.window = min(ENVELOPE_WINDOW, piece)  # the envelope is judged on the first piece of its line
        self.leading = True  # no line but blank ones seen yet
        self.started = False  # a message (or text before the first envelope) has begun
        self.prev_blank = True  # the line before the block's first line is blank, or there is none
        self.parts: list[bytes] = []
        self.size, self.over = 0, False

    def add(self, data: bytes, start: int, end: int) -> None:
        """Append data[start:end] to the message, or count it towards "too_large"."""
        if end <= start:
            return
        self.started = True
        if self.over:
            return
        self.size += end - start
        if self.size > self.max_bytes:
            self.over, self.parts = True, []
            return
        self.parts.append(data[start:end])

    def finish(self) -> bytes | str:
        """The collected message, and a fresh one begun."""
        out: bytes | str = "too_large" if self.over else b"".join(self.parts)
        self.parts, self.size, self.over = [], 0, False
        return out

    def blank_before(self, data: bytes, j: int) -> bool:
        """Is the line ending just before data[j] (a line start; data[0] is one too) blank?"""
        if j == 0:
            return self.prev_blank
        m = j - 2  # data[j - 1] is its newline; step back over carriage returns to its start
        while m >= 0 and data[m] == _CR:
            m -= 1
        return (m < 0 or data[m] == _NL) and j - (m + 1) <= self.piece

    def skip_leading_blanks(self, data: bytes, final: bool) -> tuple[int, bool]:
        """(where the first non-blank line of the file starts in data, True when more data must be read
        first): blank lines before the first message are not part of it."""
        pos = 0
        while pos < len(data):
            e = data.find(b"\n", pos, pos + self.piece)
            if e < 0 and not final and len(data) - pos < self.piece:
                return pos, True  # an unfinished line that may still turn out blank
            if e < 0 or data.count(b"\r", pos, e) != e - pos:
                self.leading = False
                return pos, False
            pos = e + 1
        return pos, not final

    def lines(self, data: bytes, end: int) -> Iterator[bytes | str]:
        """Handle data[:end], which starts at a line start and ends at a line end (or the file's end);
        yield each message completed in it."""
        pos = i = 0  # pos: the first byte not yet added to the message; i: where to search from
        while True:
            k = data.find(b"From ", i, end)
            if k < 0:
                break
            i = k + 5
            j = k
            while j > 0 and data[j - 1] == _GT:
                j -= 1
            if j > 0 and data[j - 1] != _NL:
                continue  # not at a line start
            if j < k:  # ">...>From ": unquote once when "From " lies within the line's first piece
                if k + 5 <= j + self.piece:
                    self.add(data, pos, j)
                    pos = j + 1
                continue
            e = data.find(b"\n", j, end)
            line_end = end if e < 0 else e + 1
            if self.blank_before(data, j) and ENVELOPE.match(data, k, min(line_end, k + self.window)):
                self.add(data, pos, j)
                if self.started:
                    yield self.finish()
                self.started = True
                pos = i = min(line_end, j + self.piece)
        self.add(data, pos, end)
        self.prev_blank = self.blank_before(data, end)


def split_mbox(f: BinaryIO, max_bytes: int, piece: int = READ_PIECE, block: int = BLOCK) -> Iterator[bytes | str]:
    """Messages of an open binary mbox (the rules in the module doc), or "too_large" for each message
    over `max_bytes`."""
    s = _Splitter(max_bytes, piece)
    carry = b""
    long_line = False  # the carried bytes are the middle of a line longer than a piece: plain content
    while True:
        chunk = f.read(block)
        final = not chunk
        data = carry + chunk if carry else chunk
        carry = b""
        if long_line:
            e = data.find(b"\n")
            if e < 0 and not final:
                s.add(data, 0, len(data))
                continue
            stop = len(data) if e < 0 else e + 1
            s.add(data, 0, stop)
            data, long_line, s.prev_blank = data[stop:], False, False
        if s.leading:
            pos, more = s.skip_leading_blanks(data, final)
            data = data[pos:]
            if more:
                carry = data
                continue
        end = len(data) if final else data.rfind(b"\n") + 1
        if end == 0 and not final:  # no line ends in the data: one line, begun at data[0]
            if len(data) <= piece:
                carry = data  # too short to judge its first piece yet
                continue
            end, long_line = len(data), True  # judge its start here, the rest of it is content
        yield from s.lines(data, end)
        carry = data[end:]
        if final:
            break
    if s.started:
        yield s.finish()
