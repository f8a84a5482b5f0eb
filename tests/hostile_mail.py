"""Fixtures of hostile mail: writes many kinds of malformed messages into a directory for the reader tests.

`KINDS` maps a kind name to (builder, expected outcome). A builder takes a seeded `random.Random` and
returns the raw bytes of one file; the expected outcome is "kept", a skip reason, or None when either
is acceptable (the point of that kind is only that nothing crashes). `write_hostile_corpus` writes one
file per kind (plus a hidden file and a non-mail file that the tree reader must count, not read);
`write_many_malformed` writes n small messages mixing the kinds with random damage (truncation, flipped
bytes, spliced halves) for the accounting test; `write_hostile_tree` puts both in one folder tree.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Callable
from pathlib import Path

Builder = Callable[[random.Random], bytes]

HEAD = b"From: Alice <alice@example.com>\nTo: bob@example.org\nDate: Tue, 2 Apr 2002 10:00:00 +0000\n"


def _msg(headers: bytes, body: bytes, subject: bytes = b"Hostile test") -> bytes:
    return HEAD + b"Subject: " + subject + b"\n" + headers + b"\n" + body


def _typed(ctype: bytes, body: bytes) -> bytes:
    return _msg(b"Content-Type: " + ctype + b"\n", body)


def _nested(depth: int) -> bytes:
    """A multipart nested `depth` levels deep with one text part at the bottom."""
    parts = b"Content-Type: text/plain\n\ndeep text\n"
    for level in range(depth):
        b = b"b%d" % level
        parts = (b'Content-Type: multipart/mixed; boundary="' + b + b'"\n\n--' + b + b"\n" + parts
                 + b"\n--" + b + b"--\n")
    return HEAD + b"Subject: deep\nMIME-Version: 1.0\n" + parts


def _many_parts(n: int) -> bytes:
    body = b"".join(b"--zz\nContent-Type: text/plain\n\npart %d\n" % i for i in range(n))
    return _msg(b'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="zz"\n', body + b"--zz--\n")


def _multipart(ctype: bytes, parts: list[bytes], boundary: bytes = b"BB") -> bytes:
    body = b"".join(b"--" + boundary + b"\n" + p + b"\n" for p in parts) + b"--" + boundary + b"--\n"
    return _msg(b"MIME-Version: 1.0\nContent-Type: " + ctype + b'; boundary="' + boundary + b'"\n', body)


def _rfc822_chain(depth: int) -> bytes:
    inner = b"From: x@y.z\nSubject: innermost\n\ninner text\n"
    for _ in range(depth):
        inner = b"From: x@y.z\nSubject: wrapper\nContent-Type: message/rfc822\n\n" + inner
    return _msg(b"MIME-Version: 1.0\nContent-Type: message/rfc822\n", inner)


KINDS: dict[str, tuple[Builder, str | None]] = {
    "broken_headers": (lambda r: b"Subject: broken\nFrom\nTo:: <<>>,,@@\n: no name\nDate: \n\nbody text\n", "kept"),
    "header_without_colon": (lambda r: b"Subject hello\nFrom bob\n\nbody\n", "not_mail"),
    "unknown_charset": (lambda r: _typed(b"text/plain; charset=x-klingon", b"caf\xe9 na\xefve\n"), "kept"),
    "lying_charset": (lambda r: _msg(b"Content-Type: text/plain; charset=utf-8\n", b"Caf\xe9 cr\xe8me\n"), "kept"),
    "bad_base64": (lambda r: _msg(b"Content-Type: text/plain\nContent-Transfer-Encoding: base64\n",
                                  b"SGVsbG8g!!!d29y@@bGQ=\n===\nx\n"), None),
    "bad_quoted_printable": (lambda r: _msg(b"Content-Transfer-Encoding: quoted-printable\n",
                                            b"bad =ZZ escape =4\nsoft =\n= end =\n"), "kept"),
    "deep_nesting_100": (lambda r: _nested(100), "too_deep"),
    "deep_nesting_20": (lambda r: _nested(19), "kept"),
    "ten_thousand_parts": (lambda r: _many_parts(10_000), "too_many_parts"),
    "huge_header_line": (lambda r: _msg(b"X-Huge: " + b"a" * (1 << 20) + b"\n", b"body\n"), "header_too_long"),
    "huge_folded_header": (lambda r: _msg(b"X-Folded: x\n" + b" abc def ghi\n" * 30_000, b"body\n"), "header_too_long"),
    "huge_message": (lambda r: _msg(b"", b"line of text\n" * 250_000), "too_large"),
    "binary_body": (lambda r: _typed(b"text/plain", r.randbytes(5000) + b"\0" * 2000), "binary"),
    "nul_bytes": (lambda r: _msg(b"", b"hello\0 world\0\nsecond line\n"), "kept"),
    "empty_file": (lambda r: b"", "empty"),
    "whitespace_only": (lambda r: b"\n\n  \r\n\t\n", "empty"),
    "only_headers": (lambda r: HEAD + b"Subject: only headers", "kept"),
    "only_headers_no_subject": (lambda r: HEAD, "empty"),
    "mbox_from_in_body": (lambda r: _msg(b"", b"From here on we agree.\n\nFrom bob@x.com Mon Jan  1 10:00:00 2001\n"
                                            b">From escaped\nend\n"), "kept"),
    "missing_boundary": (lambda r: _msg(b"MIME-Version: 1.0\nContent-Type: multipart/mixed\n",
                                        b"--x\nContent-Type: text/plain\n\nhi\n--x--\n"), None),
    "boundary_never_closed": (lambda r: _msg(b'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="q"\n',
                                             b"--q\nContent-Type: text/plain\n\nopen part text\n"), "kept"),
    "boundary_never_opened": (lambda r: _msg(b'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="q"\n',
                                             b"no delimiter here at all\n"), None),
    "rfc2047_garbage": (lambda r: _msg(b"", b"body\n", subject=b"=?utf-8?B?!!!?= =?nonexistent?Q?abc?= =?utf-8?Q?=ZZ?= "
                                       b"=?=?=?= =?utf-8?b?" + b"A" * 5000 + b"?= =?unicode-escape?q?\\ud800?="),
                        "kept"),
    "invalid_utf8": (lambda r: _typed(b"text/plain; charset=utf-8", b"ok \xff\xfe \xc3( \xed\xa0\x80 caf\xc3\xa9\n"),
                     "kept"),
    "utf16_body": (lambda r: _typed(b"text/plain; charset=utf-16", "Grüße aus Köln\n".encode("utf-16")), "kept"),
    "utf16_undeclared": (lambda r: _msg(b"", "plain words in utf-16\n".encode("utf-16-le")), "kept"),
    "surrogate_escapes": (lambda r: _msg(b"Content-Type: text/plain; charset=raw-unicode-escape\n",
                                         b"escape \\ud800 and \\udfff and \\U0010ffff\n"), "kept"),
    "utf7_surrogates": (lambda r: _typed(b"text/plain; charset=utf-7", b"lone +2AA- surrogate +ZeVnLIqe-\n"), "kept"),
    "bytes_codec_charset": (lambda r: _msg(b"Content-Type: text/plain; charset=base64\n", b"aGVsbG8=\n"), "kept"),
    "html_only": (lambda r: _typed(b"text/html", b"<html><style>x{}</style><p>Hello &amp; bye</p></html>\n"), "kept"),
    "html_unterminated_comments": (lambda r: _typed(b"text/html", b"<p>start</p>" + b"<!--" * 100_000), "kept"),
    "html_unterminated_tags": (lambda r: _typed(b"text/html", b"text " + b"</" * 200_000 + b"<a " * 100_000), "kept"),
    "attachment_only": (lambda r: _multipart(b"multipart/mixed", [
        b"Content-Type: application/pdf\nContent-Disposition: attachment; filename=a.pdf\n"
        b"Content-Transfer-Encoding: base64\n\n" + base64.encodebytes(b"%PDF-1.4 binary" * 50)]), "no_text_part"),
    "text_attachment_only": (lambda r: _multipart(b"multipart/mixed", [
        b"Content-Type: text/plain\nContent-Disposition: attachment; filename=notes.txt\n\nnotes"]), "no_text_part"),
    "crlf_line_endings": (lambda r: _msg(b"", b"line one\nline two\n").replace(b"\n", b"\r\n"), "kept"),
    "cr_line_endings": (lambda r: _msg(b"", b"line one\nline two\n").replace(b"\n", b"\r"), "kept"),
    "mixed_line_endings": (lambda r: b"Subject: mixed\r\nFrom: a@b.c\rTo: d@e.f\n\r\nbody\r\rmore\n", "kept"),
    "duplicate_headers": (lambda r: b"Subject: one\n" * 50 + b"From: a@b.c\nFrom: d@e.f\nMessage-ID: <1@x>\n"
                          b"Message-ID: <2@x>\n\nbody\n", "kept"),
    "long_subject": (lambda r: _msg(b"", b"body\n", subject=b"word " * 10_000), "kept"),
    "non_ascii_header_bytes": (lambda r: b"Subject: Gr\xc3\xbc\xc3\x9fe \xe9t\xe9\nFrom: J\xf6rg <j@x.de>\n\nbody\n",
                               "kept"),
    "header_control_chars": (lambda r: b"Subject: ctl\x01\x02\x1b here\nFrom: a@b.c\nSub\x00ject: x\n\nbody\n", "kept"),
    "content_type_no_subtype": (lambda r: _msg(b"Content-Type: text\n", b"no subtype\n"), "kept"),
    "content_type_garbage": (lambda r: _msg(b"Content-Type: ;;;==\"\"\\;charset=\n", b"garbage type\n"), "kept"),
    "content_type_semicolons": (lambda r: _msg(b"Content-Type: text/plain" + b";a" * 1000 + b"\n", b"semi\n"), "kept"),
    "content_type_semicolon_bomb": (lambda r: _multipart(b"multipart/mixed", [
        b"Content-Type: text/plain" + b";a" * 1500 + b"\n\npart" for _ in range(50)]), "header_too_long"),
    "content_type_huge_in_part": (lambda r: _multipart(b"multipart/mixed", [
        b"Content-Type: text/plain; name=\"" + b"x;" * 50_000 + b"\"\n\nhi"]), "header_too_long"),
    "rfc2231_bad_charset": (lambda r: _typed(b"text/plain; charset*=nonesuch''%ZZ%41", b"rfc2231\n"), "kept"),
    "message_rfc822_nested": (lambda r: _multipart(b"multipart/mixed", [
        b"Content-Type: text/plain\n\nsee attached",
        b"Content-Type: message/rfc822\n\nFrom: x@y.z\nSubject: inner\n\ninner body"]), "kept"),
    "rfc822_chain_30": (lambda r: _rfc822_chain(30), None),
    "multipart_alternative": (lambda r: _multipart(b"multipart/alternative", [
        b"Content-Type: text/plain; charset=iso-8859-1\nContent-Transfer-Encoding: quoted-printable\n\ncaf=E9",
        b"Content-Type: text/html\n\n<p>caf&eacute;</p>"]), "kept"),
    "random_garbage": (lambda r: bytes(r.getrandbits(8) for _ in range(3000)), None),
    "random_text_no_headers": (lambda r: b"just some words without headers\nsecond line\n", "not_mail"),
    "address_comment_bomb": (lambda r: b"From: " + b"(" * 20_000 + b"a@b.c\nTo: " + b'"' * 20_000
                             + b"\nSubject: bomb\n\nb\n",
                             "kept"),
    "many_recipients": (lambda r: _msg(b"Cc: " + b", ".join(b"u%d@example.com" % i for i in range(2000)) + b"\n",
                                       b"hi\n"), "kept"),
    "bad_dates": (lambda r: b"Date: Feb 30 99999 25:61:61 +9999\nSubject: date\nFrom: a@b.c\n\nbody\n", "kept"),
    "uuencode_garbage": (lambda r: _msg(b"Content-Transfer-Encoding: x-uuencode\n", b"begin 644 f\n!!!junk\nend\n"),
                         None),
    "single_huge_body_line": (lambda r: _msg(b"", b"w" * 1_500_000 + b"\n"), "kept"),
    "quotes_only_no_subject": (lambda r: b"From: a@b.c\nTo: d@e.f\n\n> quoted\n> only\n", "empty"),
    "many_short_lines": (lambda r: _msg(b"", b"a\n" * 300_000), "too_many_lines"),
    "many_header_lines": (lambda r: HEAD + b"X-A: b\n" * 10_000 + b"Subject: h\n\nbody\n", "header_too_long"),
    "envelope_lines_as_headers": (lambda r: b"From a@b Mon Jan  1 10:00:00 2001\n" * 20_000, "header_too_long"),
    "deep_nesting_many_lines": (lambda r: _nested(19).replace(b"deep text\n", b"x\n" * 50_000), "too_many_lines"),
    "entity_bomb_html": (lambda r: _msg(b"Content-Type: text/html\n", b"<p>&#" * 200_000), "kept"),
    "attribution_bomb": (lambda r: _msg(b"", b"On Monday Bob wrote:\n\n" * 50_000), None),
    "pii_bombs": (lambda r: _msg(b"", (b"a" * 60 + b"@") * 5000 + b"1-" * 100_000 + b" +1" * 100_000
                                 + b" http://" * 50_000 + b" " * 100_000 + b"x\n"), "kept"),
    "envelope_then_message": (lambda r: b"From a@b.c  Tue Apr  2 10:00:00 2002\n" + _msg(b"", b"after envelope\n"),
                              "kept"),
}

HEAVY = frozenset(("ten_thousand_parts", "huge_header_line", "huge_folded_header", "huge_message",
                   "single_huge_body_line",
                   "html_unterminated_comments", "html_unterminated_tags", "content_type_huge_in_part",
                   "content_type_semicolon_bomb", "many_short_lines", "many_header_lines", "envelope_lines_as_headers",
                   "deep_nesting_many_lines", "entity_bomb_html", "attribution_bomb", "pii_bombs"))


def write_hostile_corpus(directory: Path, seed: int = 0) -> int:
    """Write one file per kind in KINDS (as `<kind>.eml`), plus a hidden file and a .png; return files written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for name, (build, _) in KINDS.items():
        (directory / f"{name}.eml").write_bytes(build(rng))
    (directory / ".hidden").write_bytes(b"Subject: hidden\n\nshould be counted as hidden_file\n")
    (directory / "picture.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    return len(KINDS) + 2


def _damage(data: bytes, rng: random.Random, other: bytes) -> bytes:
    how = rng.randrange(5)
    if how == 0 and data:
        return data[: rng.randrange(len(data))]  # truncated anywhere
    if how == 1 and data:
        b = bytearray(data)
        for _ in range(rng.randint(1, 20)):
            b[rng.randrange(len(b))] = rng.getrandbits(8)  # flipped bytes
        return bytes(b)
    if how == 2:
        return data[: len(data) // 2] + other[len(other) // 2:]  # spliced halves of two kinds
    if how == 3:
        lines = data.split(b"\n")
        return b"\n".join(lines + rng.sample(lines, min(len(lines), 5)))  # shuffled-in duplicate lines
    return data


def write_many_malformed(directory: Path, n: int = 1000, seed: int = 0) -> int:
    """Write n small damaged messages (`msg_00000.eml` ...) mixing the light kinds; return n."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    light = [name for name in KINDS if name not in HEAVY]
    for i in range(n):
        a, b = rng.choice(light), rng.choice(light)
        data = _damage(KINDS[a][0](rng), rng, KINDS[b][0](rng))
        (directory / f"msg_{i:05d}.eml").write_bytes(data)
    return n


def write_hostile_tree(root: Path, damaged: int = 150) -> Path:
    """A folder tree for the prepare tests: `kinds/` (write_hostile_corpus) and `damaged/` (write_many_malformed)."""
    write_hostile_corpus(Path(root) / "kinds")
    write_many_malformed(Path(root) / "damaged", n=damaged)
    return Path(root)
