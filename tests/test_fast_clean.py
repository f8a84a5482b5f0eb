"""The fast cleaning paths (clean.py, quoted.py) against the code they replaced (tests/slow_clean.py):
same output on hypothesis-built bodies made of the lines cleaning looks for (quotes, attributions, cut
markers, header blocks, signatures), with the characters it treats specially (blanks at line ends,
controls, C1 controls, lone surrogates, BOMs, case-folding oddities), and on real-shaped mail.
"""

from __future__ import annotations

import slow_clean as slow
from hypothesis import given, settings
from hypothesis import strategies as st
from mail_samples import corpus_messages

from seqlab.data.mail.clean import CleanOptions, clean_body, normalize_text, safe_text, strip_quotes
from seqlab.data.mail.mime import decode_header_text, parse_addresses
from seqlab.data.mail.quoted import clean_and_context
from seqlab.data.synthetic.generator import synthetic_messages

_LINES = [
    "> quoted", "  >x", ">", "\t> > deeper", ">> b", "On Mon, 1 Jan 2001, Bob <b@x.org>", "wrote:", "Bob wrote:",
    "Bob WROTE:  ", "Bob rewrote:", "On Tue, Ann wrote:", "-----Original Message-----", " -- Original Message --",
    "----- Forwarded by Jeff/HOU/ECT on 05/14/2001 -----", "---------- Forwarded message ---------",
    "Begin forwarded message:", "From: Ann", "from:\tAnn", "To: Bob", "Sent: Monday", "Cc: x", "Subject: y",
    "Date: z", "_" * 20, "_" * 25 + "  ", "-- ", "--", "Best, Ann", "text £5", "ſ", "İstanbul", "", " ", "\t",
    "ordinary words here", "ORIGINAL MESSAGE", "To:x", "Fwd: forwarded",
]
_GLUE = ["\n", "\n", "\n", "\r\n", "\r", " \n", "\xa0\n", "\u3000\n", "\t\n", "\n\n\n", "\ufeff", "\x01", "\x85",
         "\x7f", "\ud800", "\udce9", "\x1b", "\x0c", "é", "\u2028", ""]
_bodies = st.lists(st.one_of(st.sampled_from(_LINES), st.sampled_from(_GLUE)), max_size=40).map("".join)
_opts = st.builds(CleanOptions, keep_quotes=st.booleans(), keep_signatures=st.booleans(), mask_pii=st.booleans())


@settings(max_examples=600, deadline=None)
@given(_bodies, _opts)
def test_cleaning_equals_the_slow_code(body: str, opts: CleanOptions) -> None:
    assert safe_text(body) == slow.safe_text(body)
    normalized = normalize_text(body)
    assert normalized == slow.normalize_text(body)
    assert strip_quotes(normalized) == slow.strip_quotes(normalized)
    assert strip_quotes(body) == slow.strip_quotes(body)  # also on text that is not normalized
    assert clean_body(body, opts) == slow.clean_body(body, opts)
    assert clean_and_context(body, opts) == (slow.clean_body(body, opts), slow.quoted_context(body, opts))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_safe_text_on_any_text(text: str) -> None:
    assert safe_text(text) == slow.safe_text(text)
    assert normalize_text(text) == slow.normalize_text(text)


def test_real_shaped_mail() -> None:
    bodies = [raw.decode("utf-8").partition("\n\n")[2] for raw in corpus_messages()]
    bodies += [raw.decode("utf-8").partition("\n\n")[2] for _, raw in synthetic_messages(count=300, seed=5)]
    quoted = 0
    for body in bodies:
        for opts in (CleanOptions(), CleanOptions(keep_quotes=True, mask_pii=True)):
            got = clean_and_context(body, opts)
            assert got == (slow.clean_body(body, opts), slow.quoted_context(body, opts))
            quoted += bool(got[1])
    assert quoted > 50  # many of them reply with a quote, so the context path is exercised


_HEADER_PIECES = ["a", "Bob", " ", "  ", "\t", "\n ", "\r\n\t", "\n", "\r", "\x01", "\x0b", "\x0c", "\x1c", "\x1f",
                  "\x7f", "=?utf-8?q?caf=C3=A9?=", "=?", "?=", "=?iso-8859-1?b?Y2Fm6Q==?=", "\udce9", "é", "\xa0",
                  "\u2003",
                  "<bob@x.org>", "\"Smith, Bob\"", "(comment)", ",", "ann@y.example", "@", ".", "Re:"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_HEADER_PIECES), max_size=12).map("".join))
def test_header_decoding_equals_the_slow_code(value: str) -> None:
    assert decode_header_text(value) == slow.decode_header_text(value)
    assert parse_addresses(value) == slow.parse_addresses(value)
    assert parse_addresses(value) == slow.parse_addresses(value)  # the cached answer is the same list


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_header_decoding_on_any_text(value: str) -> None:
    assert decode_header_text(value) == slow.decode_header_text(value)
