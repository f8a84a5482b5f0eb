"""simple.py builds, for a simple message, exactly the message the stdlib feed parser builds (and declines
everything else): compared on generated office mail, the test corpus, damaged mail, and
hypothesis-built header blocks, both as `EmailMessage`s and as what `extract.parse_parts` makes of them.
"""

from __future__ import annotations

from email.parser import BytesParser
from pathlib import Path

from hostile_mail import write_many_malformed
from hypothesis import given, settings
from hypothesis import strategies as st
from mail_samples import corpus_messages

from seqlab.data.mail import extract
from seqlab.data.mail.extract import body_from_message, collect_headers, parse_parts, read_policy, strip_envelope
from seqlab.data.mail.simple import simple_fields, simple_message
from seqlab.data.synthetic.generator import synthetic_messages


def _outcome(parts) -> object:  # noqa: ANN001 - a function of no arguments
    """What `parts()` returns, or the skip reason or exception it raises (the stdlib raises on some charsets)."""
    try:
        return parts()
    except extract.Skip as skip:
        return skip.reason
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__, str(exc)


def _same_as_parser(raw: bytes) -> bool:
    """True when simple_message took the message; asserts it equals the parser's then, and that the
    reader's direct path (`simple_parts`, no message built) gives what the reader makes of the parser's."""
    data = strip_envelope(raw)
    full = BytesParser(policy=read_policy()).parsebytes(data)
    direct = _outcome(lambda: extract.simple_parts(data))
    if direct is not None:
        assert direct == _outcome(lambda: (collect_headers(full.raw_items()), body_from_message(full, False)))
    fields = simple_fields(data)
    if fields is not None:
        assert fields[0] == list(full.raw_items())
    fast = simple_message(data, read_policy())
    if fast is None:
        assert direct is None
        return False
    assert list(fast.raw_items()) == list(full.raw_items())
    for question in (lambda m: m.get_payload(), lambda m: m.get_payload(decode=True), lambda m: m.get_content_type(),
                     lambda m: m.get_content_charset(), lambda m: m.is_multipart()):
        assert _outcome(lambda q=question: q(fast)) == _outcome(lambda q=question: q(full))
    return True


def _parts_without_fast_path(data: bytes, monkeypatch) -> tuple:  # noqa: ANN001 - pytest's MonkeyPatch
    with monkeypatch.context() as m:
        m.setattr(extract, "simple_message", lambda data, policy: None)
        m.setattr(extract, "simple_parts", lambda data: None)
        return parse_parts(data, False)


def _messages(tmp_path: Path) -> list[bytes]:
    msgs = [raw for _, raw in synthetic_messages(count=60, seed=3)] + corpus_messages()
    write_many_malformed(tmp_path / "damaged", n=150)
    msgs += [p.read_bytes() for p in sorted((tmp_path / "damaged").rglob("*")) if p.is_file()]
    return msgs


def test_simple_messages_equal_the_parsers_and_parse_the_same(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    msgs = _messages(tmp_path)
    taken = [_same_as_parser(raw) for raw in msgs]
    assert sum(taken[:60]) == 60  # ordinary office mail always takes the fast path
    assert 0 < sum(taken[60:]) < len(msgs) - 60  # hostile mail mostly does not
    for raw in msgs:
        data = strip_envelope(raw)
        try:
            want = _parts_without_fast_path(data, monkeypatch)
        except extract.Skip as skip:
            want = skip.reason
        try:
            got = parse_parts(data, False)
        except extract.Skip as skip:
            got = skip.reason
        assert got == want


_name = st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters=":"), min_size=1, max_size=8)
_value = st.text(st.sampled_from(list("ab :;\t=\"/<>@x") + ["\udc80", "é"]), max_size=12)
_line = st.one_of(
    st.builds(lambda n, v: f"{n}:{v}", _name, _value),
    st.builds(lambda v: " " + v, _value),  # continuation
    st.builds(lambda v: "From " + v, _value),  # envelope-like
    st.sampled_from(["Content-Type: multipart/mixed; boundary=b", "Content-Type: message/rfc822",
                     "Content-Type: text/plain; charset=utf-8", "Content-Transfer-Encoding: base64",
                     "Content-Type:text/html", ":no name", "no colon here", "Subject: x"]),
    st.builds(lambda n, t, c: f"{n}: {t}{c}", st.sampled_from(["Content-Type", "content-type", "CONTENT-TYPE"]),
              st.sampled_from(["text/plain", "text/html", "Text/HTML", "text/enriched", "application/pdf", "text",
                               "image/png", "multipart/alternative", "text/plain/x", ""]),
              st.sampled_from(["", "; charset=us-ascii", '; charset="iso-8859-1"', "; charset=utf-8",
                               "; charset=uft-8", "; charset*=utf-8''x", "; charset=\udc80", "; charset=\"",
                               ";\n charset=utf-16", "; name=a.txt", "; charset=\"koi8-r\" ;"])),
    st.builds(lambda n, v: f"{n}: {v}", st.sampled_from(["Content-Transfer-Encoding", "content-transfer-encoding"]),
              st.sampled_from(["7bit", "8bit", "quoted-printable", "Quoted-Printable", "quoted-printable ",
                               "base64", "x-uuencode", "binary", "junk", "\n quoted-printable"])),
    st.builds(lambda v: f"Content-Disposition: {v}",
              st.sampled_from(["attachment", "inline", "ATTACHMENT; filename=a", "attachment\n ; x=1", ""])),
)
_body = st.lists(st.sampled_from(list("ab\n:=- <>") + ["=C3=A9", "=\n", "=E9", "é", "\udce9", "\x00", "<p>",
                                                      "&amp;", "\x00\x01\x02\x03", "<br>"]), max_size=30).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.lists(_line, min_size=1, max_size=6), _body)
def test_generated_header_blocks(lines: list[str], body: str) -> None:
    raw = ("\n".join(lines) + "\n\n" + body).encode("utf-8", "surrogateescape")
    _same_as_parser(raw)
