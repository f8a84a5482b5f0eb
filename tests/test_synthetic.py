"""The synthetic office-email generator: deterministic, parseable, and holding the regularities it promises
(greetings naming the recipients, sign-offs naming the sender, reference codes repeated within an email,
replies threaded onto earlier messages) and the memory probes of the `memory` lesson."""

from __future__ import annotations

import email
import hashlib
import random
import re
import subprocess
import sys
from email import policy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqlab.data.synthetic import words as W
from seqlab.data.synthetic.body import count_words
from seqlab.data.synthetic.generator import REF_RE, cast, memory_email, memory_emails, synthetic_messages

_QUOTE_START = re.compile(r"\n(-----Original Message-----|On .+ wrote:)\n")


def _messages(count: int = 300, seed: int = 11, **kw: int) -> list[tuple[str, email.message.EmailMessage]]:
    return [(label, email.message_from_bytes(raw, policy=policy.default)) for label, raw in
            synthetic_messages(count, seed, **kw)]


def _own_text(msg: email.message.EmailMessage) -> str:
    """The sender's own words: the body before any signature block or quoted previous message."""
    body = msg.get_content()
    body = body.split("\n-- \n")[0]
    match = _QUOTE_START.search(body)
    return (body[: match.start()] if match else body).strip()


def _first_names(header) -> list[str]:
    return [a.display_name.split()[0] for a in header.addresses]


def test_same_seed_same_bytes_and_other_seed_differs() -> None:
    a = list(synthetic_messages(80, seed=7))
    b = list(synthetic_messages(80, seed=7))
    c = list(synthetic_messages(80, seed=8))
    assert a == b
    assert [raw for _, raw in a] != [raw for _, raw in c]
    assert len(a) == 80 and [label for label, _ in a] == [f"synthetic:{i:06d}" for i in range(80)]


def test_output_does_not_depend_on_the_hash_seed() -> None:
    code = (
        "import hashlib; from seqlab.data.synthetic.generator import synthetic_messages as s; "
        "print(hashlib.sha256(b''.join(r for _, r in s(60, seed=3))).hexdigest())"
    )
    here = hashlib.sha256(b"".join(r for _, r in synthetic_messages(60, seed=3))).hexdigest()
    for hash_seed in ("0", "12345"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={"PYTHONHASHSEED": hash_seed, "PATH": "", "LC_ALL": "C"})
        assert out.stdout.strip() == here


def test_every_message_parses_with_the_expected_headers() -> None:
    msgs = _messages()
    ids = set()
    for _, msg in msgs:
        assert not msg.defects
        for name in ("From", "To", "Date", "Subject", "Message-ID"):
            assert msg[name], name
        assert msg["Date"].datetime is not None
        assert msg.get_content_type() == "text/plain"
        assert msg.get_content().strip()
        ids.add(msg["Message-ID"])
    assert len(ids) == len(msgs)
    assert any(msg["Cc"] for _, msg in msgs)
    # All three transfer encodings occur, so a reader's decoding is exercised.
    assert {str(msg["Content-Transfer-Encoding"]) for _, msg in msgs} >= {"7bit", "quoted-printable", "base64"}


def test_non_ascii_names_survive_header_encoding() -> None:
    zoe = next(p for p in cast() if p.first == "Zoë")
    froms = {str(msg["From"]) for _, msg in _messages(1500, seed=2)}
    assert f"Zoë Martin <{zoe.address}>" in froms
    assert zoe.address == "zoe.martin@harbourline.example"


def test_greetings_name_the_recipients_and_signoffs_name_the_sender() -> None:
    for label, msg in _messages():
        lines = [line for line in _own_text(msg).split("\n") if line.strip()]
        greeting, signoff, name = lines[0], lines[-2], lines[-1]
        to = _first_names(msg["To"])
        if len(to) <= 2:
            for first in to:
                assert first in greeting, (label, greeting, to)
        else:
            assert greeting in W.GREETINGS_MANY
        sender = msg["From"].addresses[0].display_name
        assert signoff in W.SIGNOFFS, (label, signoff)
        assert name in (sender, sender.split()[0]), (label, name, sender)


def test_people_mostly_use_their_own_signoff() -> None:
    favourite = {p.full: p.signoff for p in cast()}
    hits = [favourite[msg["From"].addresses[0].display_name] == [x for x in _own_text(msg).split("\n") if x][-2]
            for _, msg in _messages(400, seed=4)]
    assert 0.7 < sum(hits) / len(hits) < 0.95


def test_reference_codes_are_repeated_within_each_email() -> None:
    with_ref = 0
    for label, msg in _messages():
        own = _own_text(msg)
        codes = REF_RE.findall(own)
        for code in set(codes):
            assert codes.count(code) >= 2, (label, code)
        if codes:
            with_ref += 1
            # Introduced early, repeated late: the first use is in the first half of the text.
            assert own.index(codes[0]) < len(own) / 2 < own.rindex(codes[0]), label
    assert with_ref > 0.75 * 300


def test_replies_point_at_earlier_messages_and_quote_them() -> None:
    seen: dict[str, email.message.EmailMessage] = {}
    replies = 0
    thread_len: dict[str, int] = {}
    for label, msg in _messages():
        parent = msg["In-Reply-To"]
        if parent:
            replies += 1
            assert str(parent) in seen, label
            refs = str(msg["References"]).split()
            assert refs[-1] == str(parent) and all(r in seen for r in refs)
            assert str(msg["Subject"]).lower().startswith("re: ")
            assert str(msg["Subject"])[4:] == str(seen[refs[0]]["Subject"])
            assert _QUOTE_START.search(msg.get_content())
            thread_len[refs[0]] += 1
        else:
            thread_len[str(msg["Message-ID"])] = 1
        seen[str(msg["Message-ID"])] = msg
    assert replies > 50
    assert max(thread_len.values()) <= 5 and len(set(thread_len.values())) >= 4


def test_lengths_stay_within_the_bounds() -> None:
    for kw in ({}, {"min_words": 60, "max_words": 70}, {"min_words": 0, "max_words": 20}):
        for label, msg in _messages(120, seed=5, **kw):
            n = count_words(_own_text(msg))
            assert kw.get("min_words", 40) <= n <= kw.get("max_words", 200), (kw, label, n)


def test_bodies_are_varied_not_duplicated() -> None:
    owns = [_own_text(msg) for _, msg in _messages(600, seed=9)]
    assert len(set(owns)) == len(owns)  # corpus dedupe would otherwise throw mail away
    sentences = {s for own in owns for s in re.split(r"(?<=[.?!])\s+", own)}
    assert len(sentences) > 3000


def test_invalid_arguments_are_value_errors() -> None:
    with pytest.raises(ValueError, match="count"):
        synthetic_messages(-1)
    with pytest.raises(ValueError, match="max_words"):
        synthetic_messages(10, min_words=50, max_words=40)
    with pytest.raises(ValueError, match="max_words"):
        synthetic_messages(10, min_words=0, max_words=5)
    with pytest.raises(ValueError, match="distance_words"):
        memory_email(random.Random(0), 3)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32), lo=st.integers(0, 120), span=st.integers(0, 80))
def test_any_seed_and_length_gives_parseable_mail_within_bounds(seed: int, lo: int, span: int) -> None:
    hi = max(lo + span, 20)
    for _, msg in _messages(6, seed, min_words=lo, max_words=hi):
        assert not msg.defects
        assert lo <= count_words(_own_text(msg)) <= hi


@pytest.mark.parametrize("distance", [5, 6, 17, 120, 700])
def test_memory_email_recalls_its_reference_at_the_requested_distance(distance: int) -> None:
    probes = memory_emails(12, distance, seed=1)
    assert probes == memory_emails(12, distance, seed=1)
    for probe in probes:
        assert REF_RE.fullmatch(probe.ref)
        assert REF_RE.findall(probe.text) == [probe.ref, probe.ref]
        assert probe.distance_words == distance
        assert probe.prompt.endswith("please quote ")
        assert probe.text[probe.recall_at:].startswith(probe.ref + ".")
        # The words between are counted independently of the property, from the raw text.
        first_end = probe.text.index(probe.ref) + len(probe.ref)
        between = [w for w in probe.text[first_end : probe.recall_at].split() if re.search(r"\w", w)]
        assert len(between) == distance
    assert len({p.ref for p in probes}) == len(probes)


def test_memory_email_is_driven_only_by_the_given_rng() -> None:
    assert memory_email(random.Random(5), 40) == memory_email(random.Random(5), 40)
    assert memory_email(random.Random(5), 40) != memory_email(random.Random(6), 40)
