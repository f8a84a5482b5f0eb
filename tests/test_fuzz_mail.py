"""Fuzzing the mail reader with hypothesis, and replaying every input fuzzing ever found.

Each example goes through `mail_fuzzing`'s target (the one `tests/fuzz_mail.py` runs under atheris): the
message is read in-process and through the worker path, and must end kept or under a per-message skip
reason, with clean text, the same record both ways, within the per-message CPU bound, and (pumped inputs)
without super-linear growth. The strategies build mail from the pieces that have broken mail readers:
MIME trees with missing, repeated or unclosed boundaries, RFC 2047 words, charsets, transfer encodings,
quotes, signatures, HTML, PII, line-ending mixes; plus raw bytes and damaged hostile fixtures.

A failing example is also written to out/fuzz/mail/hypothesis/ (the shrunk one last), ready to be copied
into tests/fuzz_corpus/mail/ under a name saying what it found.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from mail_fuzzing import (
    PUMP_SEEDS,
    options_of,
    plain_input,
    pumped_input,
    regression_files,
    run_input,
    seed_inputs,
)

from seqlab.data.mail.clean import safe_text
from seqlab.data.mail.mime import BINARY_FRACTION, decode_bytes, looks_binary
from seqlab.data.mail.reader import CleanOptions

FAILURES = Path(__file__).resolve().parent.parent / "out" / "fuzz" / "mail" / "hypothesis"
_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large]


def fuzz(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, suppress_health_check=_HEALTH)
SEEDS = seed_inputs()


def _run_saving(data: bytes, test: str) -> None:
    """run_input, keeping a failing input on disk: hypothesis replays the shrunk example last."""
    try:
        run_input(data)
    except BaseException:
        FAILURES.mkdir(parents=True, exist_ok=True)
        (FAILURES / f"{test}-last").write_bytes(data)
        raise


# ---------------------------------------------------------------- the regression corpus and the seeds


@pytest.mark.parametrize("path", regression_files(), ids=lambda p: p.name)
def test_every_input_fuzzing_found_stays_fixed(path: Path) -> None:
    run_input(path.read_bytes())


def test_regression_corpus_is_small_and_distinct() -> None:
    files = regression_files()
    assert files, "tests/fuzz_corpus/mail/ holds the inputs that once failed"
    assert all(p.stat().st_size <= 4096 for p in files)  # a pumped input stays small however big its message
    assert len({hashlib.sha256(p.read_bytes()).digest() for p in files}) == len(files)


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed_inputs_pass(name: str) -> None:
    run_input(SEEDS[name])


# ---------------------------------------------------------------- strategies

options = st.builds(CleanOptions, st.booleans(), st.booleans(), st.booleans())
_WORDS = ["hello", "Bob", "wrote:", "On Monday", "--", "-- ", ">", "> >", "=?utf-8?q?caf=C3=A9?=", "=?", "?=",
          "=?utf-8?b?w6k=?=", "=?x-unknown?q?a_b?=", "<a@b.c>", "a@b.c", "(comment", ")", '"', "\\", ";", ",", "www.",
          "http://x.org/a?b=c.", "+1 (713) 555-0100", "713-555-0100", "&amp;", "&#", "&#x1F600;", "<p>", "</p>",
          "<!--", "-->", "<script>", "</style>", "<br>", "\t", "  ", "é", "日本", "\u202e", "\ufeff", "\x00", "\x1b",
          "_" * 20, "-----Original Message-----", "----- Forwarded by", "Begin forwarded message:", "From: x",
          "To: y", "Sent: z", "Subject: w"]
words = st.one_of(st.sampled_from(_WORDS), st.text(max_size=12))
lines = st.lists(words, max_size=8).map(" ".join)
text_block = st.lists(lines, max_size=12).map("\n".join)
charsets = st.sampled_from(["utf-8", "uft-8", "us-ascii", "iso-8859-1", "utf-16", "utf-7", "cp1252", "koi8-r",
                            "x-klingon", "base64", "unknown-8bit", "\"utf-8\"", "gb2312", ""])
encodings = st.sampled_from(["7bit", "8bit", "base64", "quoted-printable", "x-uuencode", "binary", "bogus"])
_CTYPES = ["text/plain", "text/html", "text", "application/pdf", "message/rfc822", "multipart/mixed",
           "multipart/alternative", "multipart/", "image/png", ";;", "Text/HTML"]


def _encode(text: str, charset: str) -> bytes:
    name = charset.strip('"') or "utf-8"
    try:
        return text.encode(name, "surrogateescape")
    except (LookupError, UnicodeError):
        return text.encode("utf-8", "surrogateescape")


@st.composite
def headers(draw: st.DrawFn) -> bytes:
    names = ["From", "To", "Cc", "Subject", "Date", "Message-ID", "In-Reply-To", "References", "MIME-Version",
             "X-Mailer", "Received", "subject", "FROM"]
    out = []
    for i in range(draw(st.integers(1, 8))):  # the first is a real header name, so most inputs are mail
        name = draw(st.sampled_from(names) if i == 0 else st.one_of(st.sampled_from(names), st.text(max_size=10)))
        value = draw(st.one_of(lines, st.sampled_from(["", " ", "<1@x> <2@x>", "a@b.c, <d@e.f>", "Tue, 2 Apr 2002"])))
        fold = draw(st.sampled_from(["", "\n ", "\n\t"]))
        out.append(f"{name}:{draw(st.sampled_from([' ', '', '  ']))}{value}{fold}")
    return "\n".join(out).encode("utf-8", "surrogateescape") + b"\n"


@st.composite
def mime_part(draw: st.DrawFn, depth: int = 0) -> bytes:
    ctype = draw(st.sampled_from(_CTYPES))
    charset = draw(charsets)
    head = f"Content-Type: {ctype}; charset={charset}"
    kind = draw(st.integers(0, 3)) if depth < 3 else 0
    if kind == 3:  # a multipart, its boundary sometimes missing, wrong, repeated or never closed
        boundary = draw(st.sampled_from(["b1", "b2", "=_x", "", "b1 b2", "--"]))
        children = draw(st.lists(mime_part(depth + 1), max_size=4))
        delim = draw(st.sampled_from([boundary, boundary + "x", "b1"]))
        body = b"".join(b"--" + delim.encode() + b"\n" + c + b"\n" for c in children)
        if draw(st.booleans()):
            body += b"--" + delim.encode() + b"--\n"
        head = f'Content-Type: multipart/{draw(st.sampled_from(["mixed", "alternative"]))}; boundary="{boundary}"'
        return (head + "\n\n").encode() + body + draw(st.binary(max_size=20))
    extra = ""
    if draw(st.booleans()):
        extra += f"\nContent-Transfer-Encoding: {draw(encodings)}"
    if draw(st.booleans()):
        extra += f"\nContent-Disposition: {draw(st.sampled_from(['attachment', 'inline', 'attachment; filename=x']))}"
    payload = _encode(draw(text_block), charset)
    if kind == 1:
        payload = draw(st.binary(max_size=200))
    elif kind == 2:  # an attached or nested message
        payload = draw(headers()) + b"\n" + _encode(draw(text_block), charset)
    return (head + extra + "\n\n").encode() + payload


@st.composite
def messages(draw: st.DrawFn) -> bytes:
    raw = draw(headers()) + draw(mime_part()) if draw(st.booleans()) else draw(headers()) + b"\n" + _encode(
        draw(text_block), draw(charsets))
    if draw(st.booleans()):
        raw = b"From someone@example.com Mon Jan  1 10:00:00 2001\n" + raw
    ending = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    return raw.replace(b"\n", ending) if ending != b"\n" else raw


_MUTATIONS: list[Callable[[bytes, int, bytes], bytes]] = [
    lambda d, i, x: d[:i] + x + d[i:],  # insert
    lambda d, i, x: d[:i] + d[i + len(x):],  # delete
    lambda d, i, x: d[:i] + x + d[i + len(x):],  # overwrite
    lambda d, i, x: d[:i] + d[i:] * 2,  # repeat the tail
    lambda d, i, x: d[:i],  # truncate
]


@st.composite
def mutated_seeds(draw: st.DrawFn) -> bytes:
    data = SEEDS[draw(st.sampled_from(sorted(SEEDS)))]
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(1, max(1, len(data))))
        piece = draw(st.one_of(st.binary(max_size=16), st.sampled_from(_WORDS).map(str.encode)))
        data = draw(st.sampled_from(_MUTATIONS))(data, i, piece)
    return data


# ---------------------------------------------------------------- the fuzz tests


@fuzz(400)
@given(st.binary(max_size=3000), st.integers(0, 7))
def test_arbitrary_bytes(raw: bytes, flags: int) -> None:
    _run_saving(plain_input(raw, options_of(flags)), "arbitrary_bytes")


@fuzz(400)
@given(messages(), options)
def test_generated_mime_messages(raw: bytes, opts: CleanOptions) -> None:
    _run_saving(plain_input(raw, opts), "mime_messages")


@fuzz(800)
@given(mutated_seeds())
def test_mutated_seed_inputs(data: bytes) -> None:
    _run_saving(data, "mutated_seeds")


@fuzz(60)
@given(st.sampled_from(sorted(PUMP_SEEDS)), st.lists(st.one_of(st.sampled_from(_WORDS), st.text(max_size=6)),
                                                    min_size=1, max_size=4), options)
def test_repeating_any_part_costs_linear_time(shape: str, pump_words: list[str], opts: CleanOptions) -> None:
    prefix, _, suffix = PUMP_SEEDS[shape]
    pump = " ".join(pump_words).encode("utf-8", "surrogateescape") + b"\n" * (len(pump_words) % 2)
    _run_saving(pumped_input(prefix, pump, suffix, opts), "pumped")


@fuzz(300)
@given(st.binary(min_size=1, max_size=64), st.integers(1, 300))
@example(b"\x00\x0018\n", 20_000)  # fuzzing found it: NULs at both offsets passed as UTF-16, then kept as text
@example("plain words".encode("utf-16-le"), 3)
def test_a_body_full_of_control_bytes_is_binary_or_utf16(chunk: bytes, reps: int) -> None:
    """The binary test lets a body through for its NULs only when decoding then reads it as UTF-16."""
    data = chunk * reps
    sample = data[:65536]
    controls = sum(1 for b in sample if b < 0x20 and b not in (0x09, 0x0A, 0x0C, 0x0D, 0x1B) or b == 0x7F)
    if looks_binary(data) or controls <= BINARY_FRACTION * len(sample):
        return
    as_utf16 = {safe_text(data.decode(order, "replace")) for order in ("utf-16-le", "utf-16-be")}
    assert decode_bytes(data) in as_utf16
