"""`prepare` with its fast paths against `prepare` with the code they replaced: the DATA_DIRs
must be byte-identical, file by file. The slow path is the stdlib feed parser for every message (no
simple.py), the cleaning of tests/slow_clean.py, and the uncached and regex-based helpers; the corpus
mixes hostile and damaged mail (hostile_mail.py) with real-shaped mail: plain, Enron-layout (CRLF),
multipart/alternative with quoted-printable parts, HTML only, Latin-1, attachments, threads with quotes.
"""

from __future__ import annotations

import os
import quopri
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import slow_clean as slow
from hostile_mail import write_hostile_tree
from hypothesis import given, settings
from hypothesis import strategies as st
from mail_samples import corpus_messages
from preparing import prepare

from seqlab.data.mail import clean, extract, html_text, mime, reader
from seqlab.data.mail import message_files as files
from seqlab.data.prepare import dedupe, thread_keys, threadtable
from seqlab.data.prepare.thread_keys import utc_date
from seqlab.data.synthetic.generator import synthetic_messages

_DATE = re.compile(r"(\d{1,4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)")


def _slow_date_key(date: str | None) -> int:
    """threadtable.date_key as it was: the date string parsed back with a regex."""
    try:
        d = utc_date(date)
    except OverflowError:
        return -1
    if d is None:
        return -1
    m = _DATE.fullmatch(d)
    assert m is not None
    year = 0
    for i in range(4):
        year = year * 11 + (int(m[1][i]) + 1 if i < len(m[1]) else 0)
    return year * 10**10 + int("".join(m.groups()[1:]))


_zones = st.one_of(st.none(), st.integers(-14 * 60, 14 * 60).map(lambda m: timezone(timedelta(minutes=m))))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.datetimes(min_value=datetime(1, 1, 1), timezones=_zones).map(datetime.isoformat),
                 st.sampled_from(["0999-06-01T00:00:00", "0001-01-01T00:30:00+01:00", "9999-12-31T23:59:59-01:00",
                                  "junk", "", None])))
def test_date_key_equals_the_regex_version(date: str | None) -> None:
    assert threadtable.date_key(date) == _slow_date_key(date)


def _alternative(raw: bytes, charset: str = "utf-8") -> bytes:
    """`raw` as multipart/alternative: its body as quoted-printable text/plain and as HTML."""
    head, _, body = raw.partition(b"\n\n")
    html = b"<p>" + body.replace(b"\n\n", b"</p><p>").replace(b"\n", b"<br>\n") + b"</p>\n"
    parts = b"".join(b"--alt\nContent-Type: " + ctype + b"; charset=" + charset.encode() + b"\n"
                     b"Content-Transfer-Encoding: quoted-printable\n\n" + quopri.encodestring(data) + b"\n"
                     for ctype, data in ((b"text/plain", body), (b"text/html", html)))
    return head + b'\nMIME-Version: 1.0\nContent-Type: multipart/alternative; boundary="alt"\n\n' + parts + b"--alt--\n"


def _real_shaped(root: Path) -> None:
    """Real-shaped mail in `root/real/`: each synthetic message in one of several forms."""
    msgs = corpus_messages() + [raw for _, raw in synthetic_messages(count=160, seed=11)]
    folder = root / "real"
    folder.mkdir(parents=True)
    for i, raw in enumerate(msgs):
        head, _, body = raw.partition(b"\n\n")
        form = i % 8
        if form == 1:  # Enron: CRLF and X- headers
            raw = (head + b"\nX-From: someone\nX-Folder: \\\\x\\\\Inbox\n\n" + body).replace(b"\n", b"\r\n")
        elif form == 2:
            raw = _alternative(raw)
        elif form == 3:  # Latin-1 quoted-printable
            text = body.decode("utf-8").replace("e", "\u00e9", 3).encode("latin-1", "replace")
            raw = (head.replace(b'charset="utf-8"', b"charset=iso-8859-1") + b"\nContent-Transfer-Encoding: "
                   b"quoted-printable\n\n" + quopri.encodestring(text))
        elif form == 4:  # HTML only
            raw = head.replace(b"text/plain", b"text/html") + b"\n\n<html><body><p>" + body + b"</p></body></html>"
        elif form == 5:  # a text part and an attachment
            raw = (head + b'\nContent-Type: multipart/mixed; boundary="m"\n\n--m\nContent-Type: text/plain\n\n'
                   + body + b'\n--m\nContent-Type: application/pdf\nContent-Disposition: attachment; filename="a.pdf"'
                   b"\nContent-Transfer-Encoding: base64\n\nJVBERi0xLjQK\n--m--\n")
        elif form == 6:  # trailing blanks, a BOM, control characters
            raw = head + b"\n\n" + body.replace(b"\n", b"  \n", 5).replace(b"a", b"a\x01", 2) + b"\xef\xbb\xbf\n"
        (folder / f"{i:04d}.eml").write_bytes(raw)


@pytest.fixture(scope="module")
def mixed_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mixed")
    write_hostile_tree(root, damaged=120)
    _real_shaped(root)
    return root


def _slow_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fast path replaced by what it replaced."""
    monkeypatch.setattr(extract, "simple_parts", lambda raw: None)
    monkeypatch.setattr(extract, "simple_message", lambda data, policy: None)
    monkeypatch.setattr(reader, "clean_and_context",
                        lambda body, opts: (slow.clean_body(body, opts), slow.quoted_context(body, opts)))
    for module in (clean, mime, reader):
        monkeypatch.setattr(module, "safe_text", slow.safe_text)
    monkeypatch.setattr(clean, "normalize_text", slow.normalize_text)
    monkeypatch.setattr(html_text, "normalize_text", slow.normalize_text)
    monkeypatch.setattr(mime, "normalize_charset", lambda name: mime._normalize_charset(name) if name else None)
    monkeypatch.setattr(reader, "decode_header_text", slow.decode_header_text)
    monkeypatch.setattr(reader, "parse_addresses", slow.parse_addresses)
    uncached = thread_keys.normalize_subject.__wrapped__
    for module in (thread_keys, dedupe):  # dedupe imports it by name
        monkeypatch.setattr(module, "normalize_subject", uncached)
    monkeypatch.setattr(threadtable, "date_key", _slow_date_key)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("options", [{}, {"keep_quotes": True, "mask_pii": True}])
def test_fast_and_slow_paths_write_the_same_data_dir(mixed_tree: Path, tmp_path: Path, options: dict,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    fast = prepare(str(mixed_tree), tmp_path / "fast", workers=1, progress=False, **options)
    with monkeypatch.context() as m:
        _slow_paths(m)
        slow_meta = prepare(str(mixed_tree), tmp_path / "slow", workers=1, progress=False, **options)
    assert fast == slow_meta
    assert fast["kept"] > 200 and sum(fast["skipped"].values()) > 50  # both kinds of mail are in it
    assert fast["contexts"]["splits"]["train"]["quoted"] > 50  # replies with quotes, so contexts are compared
    assert _files(tmp_path / "fast") == _files(tmp_path / "slow")


def _slow_tree_items(root: Path) -> list[tuple[str, object]]:
    """files._iter_tree as it was: pathlib paths, `is_file()`, then `_iter_file` on each candidate."""
    def walk(root: Path):  # noqa: ANN202
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            hidden = sorted(d for d in dirnames if d.startswith("."))
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            if "cur" in dirnames and "new" in dirnames and "tmp" in dirnames:
                dirnames.remove("tmp")
            for d in hidden:
                yield here / d, "hidden_dir"
            for name in sorted(filenames):
                p = here / name
                reason = ("hidden_file" if p.name.startswith(".")
                          else "not_mail_file" if p.suffix.lower() in files.NON_MAIL_SUFFIXES else None)
                yield p, reason

    out: list[tuple[str, object]] = []
    for p, reason in walk(root):
        if reason is not None:
            out.append((str(p), reason))
        elif not p.is_file():
            out.append((str(p), "not_a_file"))
        else:
            out += list(files._iter_file(p))
    return out


def test_tree_reading_equals_the_pathlib_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "tree"
    for folder in ("a", "a/b", ".hidden", "Maildir/cur", "Maildir/new", "Maildir/tmp", "c."):
        (root / folder).mkdir(parents=True)
    msg = b"From: a@x.org\nSubject: hi\n\nbody\n"
    for name in ("1.", "2", "a/x.eml", "a/b/.dot", "a/b/y.PNG", "a/b/z.", "a/.q", "c./d.e.f", "Maildir/cur/m1",
                 "Maildir/tmp/m2", "a/b/tarball.tar.gz", ".hidden/h"):
        (root / name).write_bytes(msg)
    (root / "empty").write_bytes(b"")
    (root / "big").write_bytes(b"Subject: big\n\n" + b"x" * (files.MAX_MESSAGE_BYTES + 10))
    envelope = b"From a Mon Jan  1 10:00:00 2001\n"
    (root / "a/inbox.mbox").write_bytes(envelope + msg + b"\n" + envelope + msg)
    (root / "a/looks-like-mbox").write_bytes(envelope + msg)
    (root / "link").symlink_to(root / "2")
    (root / "broken").symlink_to(root / "nowhere")
    (root / "dirlink").symlink_to(root / "a")
    os.mkfifo(root / "fifo")
    want = _slow_tree_items(root)
    assert list(files.iter_source_items(root)) == want
    assert {reason for _, reason in want if isinstance(reason, str)} >= {
        "hidden_dir", "hidden_file", "not_mail_file", "not_a_file", "too_large"}
    monkeypatch.chdir(root)  # "." as the root: labels are then relative, as Path(".") / name makes them
    assert list(files.iter_source_items(Path("."))) == _slow_tree_items(Path("."))
    monkeypatch.chdir(tmp_path)
    assert list(files.iter_source_items(Path("tree/"))) == _slow_tree_items(Path("tree/"))
