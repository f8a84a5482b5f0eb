"""The mbox splitter as it was before it searched blocks (seqlab/data/mail/mbox.py): one
`readline` piece at a time. The reference that tests/test_fast_mbox.py holds the fast splitter to; the
piece length and the message cap are parameters here so that a test can make them small."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from seqlab.data.mail.mbox import ENVELOPE, ESCAPED_FROM


def slow_split_mbox(f: BinaryIO, max_bytes: int, piece_len: int = 64 * 1024) -> Iterator[bytes | str]:
    """Messages of an open binary mbox: split at envelope lines that follow a blank line (or start the file)."""
    buf: list[bytes] = []
    size, over, started = 0, False, False
    prev_blank, at_line_start = True, True
    while True:
        piece = f.readline(piece_len)
        if not piece:
            break
        line_start, at_line_start = at_line_start, piece.endswith(b"\n")
        if line_start and prev_blank and piece.startswith(b"From ") and ENVELOPE.match(piece, 0, 512):
            if started:
                yield "too_large" if over else b"".join(buf)
            buf, size, over, started, prev_blank = [], 0, False, True, False
            continue
        prev_blank = line_start and piece.strip(b"\r\n") == b"" and at_line_start
        if not started and prev_blank:
            continue  # blank lines before the first envelope
        started = True
        if over:
            continue
        if line_start and piece.startswith(b">") and ESCAPED_FROM.match(piece):
            piece = piece[1:]
        size += len(piece)
        if size > max_bytes:
            over, buf = True, []
            continue
        buf.append(piece)
    if started:
        yield "too_large" if over else b"".join(buf)
