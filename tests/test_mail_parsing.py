"""One message in, an Email or a named skip out: decoding checked against the stdlib's own encoders and
decoders, the record's fields, the cleaning functions, and property tests that parsing arbitrary bytes
never fails. Reading whole sources is in test_emails.py.
"""

from __future__ import annotations

import email.header
import email.utils
import hashlib
from email.message import EmailMessage

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mail_samples import mail

from seqlab.data.mail.mime import decode_bytes, decode_header_text, normalize_charset, parse_addresses
from seqlab.data.mail.reader import (
    SKIP_REASONS,
    CleanOptions,
    html_to_text,
    mask_pii,
    parse_message,
    strip_quotes,
    strip_signature,
)
from seqlab.data.mail.records import Email

OPTS = CleanOptions()


# ---------------------------------------------------------------- decoding


def _part(body: bytes, charset: str, cte: str = "8bit") -> bytes:
    return (b"From: a@b.c\nSubject: dec\nMIME-Version: 1.0\nContent-Type: text/plain; charset=\"" + charset.encode() +
            b"\"\nContent-Transfer-Encoding: " + cte.encode() + b"\n\n" + body)


@pytest.mark.parametrize("label, codec, text", [
    ("uft-8", "utf-8", "Grüße"), ("utf8", "utf-8", "naïve"), ("iso-8859-8-i", "iso-8859-8", "שלום"),
    ("cp-850", "cp850", "Ça coûte"), ("unknown-8bit", "utf-8", "déjà"), ("x-unknown", "cp1252", "déjà vu"),
    ("", "utf-8", "ünïcode"), ("us-ascii", "cp1252", "8-bit café"), ("ansi_x3.4-1968", "utf-8", "é"),
    ("iso-8859-1", "cp1252", "“smart” quotes"), ("gb2312", "gb2312", "你好"),
    ("koi8-r", "koi8-r", "привет"),
])
def test_charset_aliases(label: str, codec: str, text: str) -> None:
    got = parse_message(_part(text.encode(codec), label), "x", OPTS)
    assert isinstance(got, Email) and got.body == text
    assert decode_bytes(text.encode(codec), label) == text


def test_quoted_printable_and_base64_match_the_stdlib_encoders() -> None:
    text = "Grüße aus Köln - 20 € = a lot\nsecond line with a very long tail " + "x" * 100
    for cte in ("quoted-printable", "base64"):
        for charset in ("utf-8", "iso-8859-15"):
            m = EmailMessage()
            m["From"], m["Subject"] = "a@b.c", "enc"
            m.set_content(text, charset=charset, cte=cte)
            got = parse_message(m.as_bytes(), "x", OPTS)
            assert isinstance(got, Email) and got.body == text, (cte, charset)


def test_rfc2047_headers_match_the_stdlib_decoder() -> None:
    for value in ["=?utf-8?q?Caf=C3=A9_au_lait?=", "=?iso-8859-1?b?R3L832U=?= and =?UTF-8?B?8J+Ygg==?=",
                  "plain =?utf-8?q?mixed?= =?utf-8?q?_words?= end", "=?koi8-r?b?8NLJ18XU?="]:
        ref = str(email.header.make_header(email.header.decode_header(value)))
        assert decode_header_text(value) == " ".join(ref.split())
    assert decode_header_text("=?utf-8?q?broken=ZZ?= =?nosuch?q?x?= =?utf-8?b?!!?=") == "broken=ZZx=?utf-8?b?!!?="


def test_addresses_match_the_stdlib_parser() -> None:
    value = '"Smith, John" <John.Smith@Example.COM>, bob@x.org (Bob), Carol <carol+tag@sub.y.net>'
    ref = [addr.lower() for _, addr in email.utils.getaddresses([value])]
    assert parse_addresses(value) == ref
    assert normalize_charset("base64") is None and normalize_charset("UTF8") == "utf-8"


def test_record_fields_ids_threads_and_dates() -> None:
    raw = (b"Message-ID: <m3@x>\nIn-Reply-To: <m2@x>\nReferences: <m1@x>\n <m2@x>\nFrom: =?utf-8?q?J=C3=B6rg?= "
           b"<JOERG@x.DE>\nTo: a@y.org\nCc: B <b@y.org>, a@y.org\nDate: Tue, 2 Apr 2002 10:00:00 +0200\n"
           b"Subject:  Re:   hello\n   world\n\nbody")
    e = parse_message(raw, "src", OPTS)
    assert (e.id, e.thread, e.in_reply_to, e.references) == ("m3@x", "m1@x", "m2@x", ["m1@x", "m2@x"])
    assert (e.sender, e.recipients, e.subject) == ("joerg@x.de", ["a@y.org", "b@y.org"], "Re: hello world")
    assert e.date == "2002-04-02T10:00:00+02:00" and e.text() == "Re: hello world\n\nbody"
    bare = b"Subject: no id\nIn-Reply-To: <p@x>\nDate: not a date\n\nbody"
    e = parse_message(bare, "src", OPTS)
    assert e.id == "sha256:" + hashlib.sha256(bare).hexdigest() and e.thread == "p@x" and e.date is None
    e = parse_message(b"Subject: root\n\nbody", "src", OPTS)
    assert e.thread == e.id


def test_html_only_alternative_and_attachments() -> None:
    html_only = _part(b"<html><head><style>p {}</style></head><body><p>Hi&nbsp;there</p><p>bye</p></body>", "utf-8")
    assert parse_message(html_only.replace(b"text/plain", b"text/html"), "x", OPTS).body == "Hi there\n\nbye"
    m = EmailMessage()
    m["From"], m["Subject"] = "a@b.c", "mixed"
    m.set_content("plain wins")
    m.add_alternative("<p>html loses</p>", subtype="html")
    m.add_attachment(b"%PDF", maintype="application", subtype="pdf", filename="a.pdf")
    m.add_attachment("attached text", filename="notes.txt")
    assert parse_message(m.as_bytes(), "x", OPTS).body == "plain wins"


def test_skip_reasons() -> None:
    assert parse_message(b"", "x", OPTS) == "empty"
    assert parse_message(b"no headers at all\n", "x", OPTS) == "not_mail"
    assert parse_message(b"From: a@b.c\n\n> only a quote", "x", OPTS) == "empty"
    assert isinstance(parse_message(b"From: a@b.c\n\n> only a quote", "x", CleanOptions(keep_quotes=True)), Email)


# ---------------------------------------------------------------- cleaning


def test_strip_quotes() -> None:
    reply = "Sounds good.\n\nOn Mon, Jan 1, 2001 at 10:00 AM, Bob Jones <bob@x.com>\nwrote:\n> can you?\n>> older\n"
    assert strip_quotes(reply).strip() == "Sounds good."
    assert strip_quotes("Top\n-----Original Message-----\nFrom: x\nold") == "Top"
    assert strip_quotes("FYI\n----- Forwarded by Jeff/HOU/ECT on 05/14/2001 -----\nold") == "FYI"
    assert strip_quotes("See below\nBegin forwarded message:\n\nFrom: x") == "See below"
    assert strip_quotes("Mine\nFrom: Bob\nSent: Monday\nTo: Alice\nSubject: x\nold") == "Mine"
    kept = "He said: On Monday we ship.\nThe team wrote:\nnothing quoted follows"
    assert strip_quotes(kept) == kept
    assert strip_quotes("Ok\nBob WROTE:\n\n> x") == "Ok\n\n"
    assert strip_quotes("Ok\nBob rewrote:\n> x") == "Ok\nBob rewrote:\n"  # only the quote goes
    # lower() changes the length of "İ": the case-insensitive fallback must find the same attribution
    assert strip_quotes("İstanbul\nOn Mon, Bob wrote:\n> x\nend") == "İstanbul\nend"


def test_strip_signature() -> None:
    assert strip_signature("Body\n-- \nAlice\n+1 555") == "Body"
    assert strip_signature("a\n-- \nfirst\n-- \nsecond") == "a\n-- \nfirst"  # only the last delimiter
    long_tail = "Body\n-- \n" + "\n".join(f"line {i}" for i in range(30))
    assert strip_signature(long_tail) == long_tail  # too long to be a signature


def test_mask_pii() -> None:
    text = ("Write to John.Doe+x@mail.example.co.uk or see https://example.org/a?b=1. "
            "Call (713) 555-0100, 713.555.0100 or +44 20 7946 0958. Order 2001-10-24, ref 12345.")
    assert mask_pii(text) == ("Write to <EMAIL> or see <URL>. Call <PHONE>, <PHONE> or <PHONE>. "
                              "Order 2001-10-24, ref 12345.")


def test_html_to_text() -> None:
    markup = ("<!DOCTYPE html><html><head><title>T</title><script>var a = '<p>';</script></head><body>"
              "<h1>Title</h1><div>Tom &amp; Jerry&#39;s<br>second &lt;line&gt;</div><!-- hidden -->"
              "<ul><li>one</li><li>two</li></ul><table><tr><td>a</td><td>b</td></tr></table>3 < 4</body></html>")
    assert html_to_text(markup) == "Title\n\nTom & Jerry's\nsecond <line>\n\none\n\ntwo\n\na b\n\n3 < 4"
    assert html_to_text("start<!-- never closed" + "<!--" * 1000) == "start"


def test_clean_options_keep_what_they_say() -> None:
    raw = mail("s", "Mine\n\n> theirs\n\n-- \nsig line")
    assert parse_message(raw, "x", CleanOptions()).body == "Mine"
    assert parse_message(raw, "x", CleanOptions(keep_quotes=True)).body == "Mine\n\n> theirs"
    assert parse_message(raw, "x", CleanOptions(keep_signatures=True)).body == "Mine\n\n--\nsig line"
    masked = parse_message(mail("mail me at a@b.co", "call 713-555-0100"), "x", CleanOptions(mask_pii=True))
    assert (masked.subject, masked.body) == ("mail me at <EMAIL>", "call <PHONE>")


# ---------------------------------------------------------------- properties

_FRAGMENTS = st.sampled_from([
    b"Subject: ", b"From: a@b.c\n", b"Content-Type: multipart/mixed; boundary=q\n", b"--q\n", b"--q--\n", b"\n",
    b"Content-Type: text/html; charset=uft-8\n", b"Content-Transfer-Encoding: base64\n", b"=?utf-8?b?", b"?=",
    b"Content-Transfer-Encoding: quoted-printable\n", b"=C3=A9", b"=\n", b"<p>", b"&amp;", b"> ", b"-- \n",
    b"Content-Type: message/rfc822\n", b"Content-Disposition: attachment\n", b"\xff\xfe", b"\0", b"\r",
])


def _assert_sane(result: Email | str) -> None:
    if isinstance(result, str):
        assert result in SKIP_REASONS and result != "unparseable"
    else:
        for s in (result.id, result.thread, result.subject, result.body, result.sender, *result.recipients,
                  *result.references, result.date or ""):
            s.encode("utf-8")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_parse_message_never_raises_on_arbitrary_bytes(raw: bytes) -> None:
    _assert_sane(parse_message(raw, "prop", CleanOptions(mask_pii=True)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_FRAGMENTS, st.binary(max_size=20)), max_size=40))
def test_parse_message_never_raises_on_mail_like_bytes(pieces: list[bytes]) -> None:
    _assert_sane(parse_message(b"".join(pieces), "prop", CleanOptions(keep_quotes=True)))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_cleaning_functions_accept_any_text(text: str) -> None:
    assert mask_pii(mask_pii(text)) == mask_pii(text)  # placeholders are never masked again
    assert len(strip_quotes(text)) <= len(text) and len(strip_signature(text)) <= len(text)
    assert strip_signature(text + "\n-- \nsig") == text
    html_to_text(text).encode("utf-8")
