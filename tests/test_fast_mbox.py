"""The block-searching mbox splitter (seqlab/data/mail/mbox.py) against the line-by-line one it replaced
(tests/slow_mbox.py): the same messages, byte for byte, on generated mailboxes with tiny blocks, pieces and
caps (so that every boundary case falls inside a few bytes), on hostile mail, and on real-sized pieces with
lines longer than a piece; and `prepare` of an mbox gives the same DATA_DIR through either."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hostile_mail import write_hostile_tree
from hypothesis import given, settings
from hypothesis import strategies as st
from mail_samples import corpus_messages, write_mbox
from preparing import prepare
from slow_mbox import slow_split_mbox

from seqlab.data.mail import message_files as files
from seqlab.data.mail.mbox import split_mbox

LINES = [
    b"From a@b Mon Jan  1 10:00:00 2001\n", b"From a@b Mon Jan  1 10:00:00 2001\r\n",
    b"From - Mon, 1 Jan 2001 10:00:00 +0000\n", b"From a@b Mon Jan  1 10:00:00 2001 and more text here\n",
    b"From the start of a sentence\n", b"From \n", b"From", b">From a@b Mon Jan  1 10:00:00 2001\n",
    b">From here\n", b">>From there\n", b">>>\n", b"> quoted\n", b">\n", b"\n", b"\r\n", b"\r\r\n", b"\r",
    b"text\n", b"text From a@b Mon Jan  1 10:00:00 2001\n", b"Subject: hi\n", b"x" * 30 + b"\n", b"\r" * 20 + b"\n",
    b">" * 25 + b"From y\n", b"y" * 70, b"tail without a newline",
]


def both(data: bytes, max_bytes: int, piece: int, block: int) -> tuple[list, list]:
    slow = list(slow_split_mbox(io.BytesIO(data), max_bytes, piece))
    fast = list(split_mbox(io.BytesIO(data), max_bytes, piece, block))
    return slow, fast


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(LINES), max_size=40), st.sampled_from([10, 60, 200, 10**6]),
       st.sampled_from([8, 16, 40, 64, 1 << 16]), st.sampled_from([1, 2, 3, 7, 64, 1 << 20]))
def test_the_fast_splitter_equals_the_line_splitter(lines: list[bytes], max_bytes: int, piece: int,
                                                    block: int) -> None:
    slow, fast = both(b"".join(lines), max_bytes, piece, block)
    assert fast == slow


@pytest.mark.parametrize("block", [5, 4096, 1 << 20])
def test_lines_longer_than_a_piece_at_the_real_sizes(block: int) -> None:
    env = b"From a@b Mon Jan  1 10:00:00 2001"
    long_cases = [
        env + b" " + b"z" * 70_000 + b"\n",  # an envelope line longer than a piece: its tail is content
        b">" * 70_000 + b"From x\n",  # "From " past the first piece: not unquoted
        b">" * 65_000 + b"From x\n",  # within it: unquoted
        b"\r" * 65_535 + b"\n",  # the longest blank line
        b"\r" * 65_536 + b"\n",  # one longer: not blank
        b"w" * 200_000,  # a long line with no newline
    ]
    for case in long_cases:
        for after in (env + b"\n", b"\n" + env + b"\nbody\n"):
            data = env + b"\nSubject: s\n\n" + case + after + b"text\n\n" + env + b"\nlast\n"
            slow, fast = both(data, 1 << 21, 1 << 16, block)
            assert fast == slow
            slow, fast = both(case + after, 100_000, 1 << 16, block)  # and as the file's start, with a small cap
            assert fast == slow


def test_hostile_and_real_shaped_mail(tmp_path: Path) -> None:
    raws = [p.read_bytes() for p in sorted(write_hostile_tree(tmp_path / "tree", damaged=60).rglob("*"))
            if p.is_file()]
    box = write_mbox(tmp_path / "all.mbox", raws + corpus_messages())
    data = box.read_bytes() + b"\r\n\r\n" + data_tail()
    for block in (997, 1 << 20):
        slow, fast = both(data, files.MAX_MESSAGE_BYTES, 1 << 16, block)
        assert fast == slow and len(fast) >= len(raws)


def data_tail() -> bytes:
    """Unescaped "From " lines, CRLF envelopes and a last message without a final newline."""
    return (b"From x@y Tue Feb  2 11:00:00 2010\r\nSubject: crlf\r\n\r\nFrom me to you\r\n\r\n"
            b"From x@y Tue Feb  2 11:00:00 2010\r\nSubject: end\r\n\r\nno newline")


def test_prepare_of_an_mbox_is_the_same_through_either_splitter(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    raws = [p.read_bytes() for p in sorted(write_hostile_tree(tmp_path / "tree", damaged=40).rglob("*"))
            if p.is_file()]
    box = write_mbox(tmp_path / "all.mbox", corpus_messages() + raws)
    prepare(str(box), tmp_path / "fast", progress=False, workers=1)
    monkeypatch.setattr(files, "split_mbox", lambda f, max_bytes: slow_split_mbox(f, max_bytes))
    prepare(str(box), tmp_path / "slow", progress=False, workers=1)
    names = sorted(p.name for p in (tmp_path / "fast").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "slow").iterdir()) and "train.bin" in names
    for name in names:
        assert (tmp_path / "fast" / name).read_bytes() == (tmp_path / "slow" / name).read_bytes(), name
