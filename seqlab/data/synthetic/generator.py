"""A seeded generator of realistic office email, so seqlab runs fully offline and can measure memory.

`synthetic_messages` yields `(label, raw RFC 822 bytes)` for threads of 1-5 messages among a fixed cast
(`words.PEOPLE`): greetings name the recipients, sign-offs name the sender (each person has a
favourite), requests order documents ("send the report before the slides"), meetings have days, times and
rooms, and a reference code such as INV-48213 is introduced early in an email and quoted again near its
end. Replies carry In-Reply-To/References and quote the previous message (Gmail `>` style or an Outlook
`-----Original Message-----` block), so the cleaner and the threading in `seqlab.data.mail.reader`/`corpus` have work.

`memory_email` builds one body in which a reference must be reproduced a chosen number of words after it
first appears: the long-range recall probe of the `memory` lesson.

Only `random.Random(seed)` drives choices, so output is byte-identical for a seed on any machine and any
PYTHONHASHSEED.
"""

from __future__ import annotations

import base64
import quopri
import random
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from email.header import Header
from email.utils import format_datetime, formataddr
from typing import NamedTuple

from seqlab.data.synthetic import words as W
from seqlab.data.synthetic.body import REF_RE, BodyWriter, Person, cast, count_words, wrap_paragraphs

__all__ = ["Person", "cast", "synthetic_messages", "memory_email", "memory_emails", "MemoryEmail", "REF_RE"]

_THREAD_SIZES = (1, 2, 3, 4, 5)
_THREAD_WEIGHTS = (35, 30, 18, 10, 7)
_START = datetime(2024, 1, 8, 9, 0, tzinfo=UTC)  # a Monday; threads start from here


def _check_lengths(min_words: int, max_words: int) -> None:
    if min_words < 0:
        raise ValueError(f"min_words must be >= 0, got {min_words}")
    if max_words < max(min_words, BodyWriter.CORE_MAX_WORDS):
        raise ValueError(
            f"max_words must be >= min_words and >= {BodyWriter.CORE_MAX_WORDS} (greeting, one request and a "
            f"sign-off), got {max_words}"
        )


def synthetic_messages(
    count: int = 2000, seed: int = 0, min_words: int = 40, max_words: int = 200
) -> Iterator[tuple[str, bytes]]:
    """Yield `count` messages as `(label, raw bytes)`, label `synthetic:NNNNNN`, in thread order.

    Each message's own text (greeting to sign-off, not its signature or quoted reply) has between
    `min_words` and `max_words` words. Raises ValueError for a negative count or impossible lengths.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    _check_lengths(min_words, max_words)
    return _generate(count, seed, min_words, max_words)


def _generate(count: int, seed: int, min_words: int, max_words: int) -> Iterator[tuple[str, bytes]]:
    rng = random.Random(seed)
    clock = _START + timedelta(days=rng.randrange(0, 120))
    made = 0
    while made < count:
        size = min(rng.choices(_THREAD_SIZES, _THREAD_WEIGHTS)[0], count - made)
        for raw in _thread(rng, clock, size, min_words, max_words):
            yield f"synthetic:{made:06d}", raw
            made += 1
        clock += timedelta(minutes=rng.randint(20, 900))


class _Sent(NamedTuple):
    message_id: str
    sender: Person
    to: tuple[Person, ...]
    date: datetime
    subject: str
    body: str  # the whole body as sent, including any signature and quote


def _thread(rng: random.Random, start: datetime, size: int, min_words: int, max_words: int) -> Iterator[bytes]:
    """One thread: an opening message and `size - 1` replies, each answering the one before."""
    people = cast()
    n_people = rng.choices((2, 3, 4), (60, 25, 15))[0]
    members = tuple(rng.sample(people, n_people))
    topic = rng.choice(("request", "meeting", "both"))
    n_to = 1 if n_people == 2 else rng.choices((1, 2, n_people - 1), (55, 30, 15))[0]
    sender, to, cc = members[0], members[1 : 1 + n_to], members[1 + n_to :]
    date = _working_hours(rng, start.astimezone(sender.zone))
    writer = BodyWriter(rng, members, date, topic)  # the thread's meeting day etc. fall after this date
    subject = writer.say(rng.choice(W.SUBJECTS))
    sent: list[_Sent] = []
    for position in range(size):
        if position:
            prev = sent[-1]
            others = [p for p in prev.to[1:] + cc if p != prev.sender]
            sender = rng.choice(others) if others and rng.random() < 0.2 else prev.to[0]
            to = (prev.sender,)
            cc = tuple(p for p in members if p not in (sender, prev.sender))
            # Office hours in the replier's own time zone.
            date = _working_hours(rng, (prev.date + timedelta(minutes=rng.randint(4, 1800))).astimezone(sender.zone))
        writer.at(date)
        own = writer.body(sender, to, reply=position > 0, target=rng.randint(min_words, max_words), max_words=max_words)
        body = wrap_paragraphs(own, rng) + writer.signature(sender)
        if position:
            body += _quote(sent[-1], outlook=sender.index % 4 == 3)
        message_id = f"<{rng.getrandbits(48):012x}.{sender.address.split('@')[0]}@mail.{sender.address.split('@')[1]}>"
        shown_subject = subject if not position else ("RE: " if sender.index % 4 == 3 else "Re: ") + subject
        sent.append(_Sent(message_id, sender, to, date, shown_subject, body))
        yield _render(rng, sent, cc)


def _working_hours(rng: random.Random, when: datetime) -> datetime:
    """Move a time into office hours (08:00-18:59, Monday to Friday), as office mail mostly is."""
    while when.weekday() >= 5 or not 8 <= when.hour <= 18:
        when = (when + timedelta(days=1)).replace(hour=8, minute=rng.randrange(60))
    return when


def _quote(prev: _Sent, outlook: bool) -> str:
    """The previous message below the reply: an Outlook header block, or `>`-prefixed lines. Day and month
    names come from our own tables, not strftime, whose output depends on the machine's locale."""
    d = prev.date
    day, month = W.DAY_NAMES[d.weekday()], W.MONTH_NAMES[d.month - 1]
    if outlook:
        clock = f"{(d.hour - 1) % 12 + 1}:{d.minute:02d} {'AM' if d.hour < 12 else 'PM'}"
        header = (
            f"\n\n-----Original Message-----\nFrom: {prev.sender.full} <{prev.sender.address}>\n"
            f"Sent: {day}, {month} {d.day}, {d.year} {clock}\n"
            f"To: {'; '.join(p.full for p in prev.to)}\nSubject: {prev.subject}\n\n"
        )
        return header + prev.body
    lines = "\n".join(">" + (" " + line if line else "") for line in prev.body.split("\n"))
    when = f"{day[:3]}, {d.day} {month[:3]} {d.year} at {d.hour:02d}:{d.minute:02d}"
    return f"\n\nOn {when}, {prev.sender.full} <{prev.sender.address}> wrote:\n\n{lines}\n"


def _address_list(people: Sequence[Person]) -> str:
    # formataddr RFC 2047-encodes non-ASCII display names ("Zoë"); long lists fold onto indented lines.
    parts = [formataddr((p.full, p.address), charset="utf-8") for p in people]
    joined = ", ".join(parts)
    return joined if len(joined) < 70 else ",\n ".join(parts)


def _render(rng: random.Random, sent: list[_Sent], cc: Sequence[Person]) -> bytes:
    """Serialise the newest message of a thread to RFC 822 bytes (headers written directly: the `email`
    package's header objects would cost most of the generator's time)."""
    this = sent[-1]
    subject = this.subject if this.subject.isascii() else Header(this.subject, "utf-8").encode()
    lines = [f"From: {_address_list([this.sender])}", f"To: {_address_list(this.to)}"]
    if cc:
        lines.append(f"Cc: {_address_list(cc)}")
    lines += [f"Date: {format_datetime(this.date)}", f"Subject: {subject}", f"Message-ID: {this.message_id}"]
    if len(sent) > 1:
        lines.append(f"In-Reply-To: {sent[-2].message_id}")
        lines.append("References: " + "\n ".join(s.message_id for s in sent[:-1]))
    # Mostly plain 8-bit text, sometimes quoted-printable or base64, so decoding is exercised too.
    body = this.body.rstrip("\n").encode("utf-8") + b"\n"
    cte = rng.choices(("7bit" if body.isascii() else "8bit", "quoted-printable", "base64"), (80, 15, 5))[0]
    if cte == "quoted-printable":
        body = quopri.encodestring(body)
    elif cte == "base64":
        body = base64.encodebytes(body)
    lines += ["MIME-Version: 1.0", 'Content-Type: text/plain; charset="utf-8"', f"Content-Transfer-Encoding: {cte}"]
    return ("\n".join(lines) + "\n\n").encode("ascii") + body


class MemoryEmail(NamedTuple):
    """A body in which `ref` appears early and must be reproduced at its last occurrence.

    `prompt` is the text up to that last occurrence (a model reads it, then should write `ref`);
    `distance_words` is the number of words (pieces holding a letter or digit) strictly between the
    two occurrences.
    """

    text: str
    ref: str

    @property
    def recall_at(self) -> int:
        return self.text.rindex(self.ref)

    @property
    def prompt(self) -> str:
        return self.text[: self.recall_at]

    @property
    def distance_words(self) -> int:
        first_end = self.text.index(self.ref) + len(self.ref)
        return count_words(self.text[first_end : self.recall_at])


def memory_email(rng: random.Random, distance_words: int) -> MemoryEmail:
    """One email whose reference, given early ("This is about ref INV-48213."), is to be quoted again
    exactly `distance_words` words later, in "... When you reply, please quote INV-48213." The words
    between are ordinary filler sentences without codes; the count includes the five-word cue.
    """
    if distance_words < BodyWriter.RECALL_CUE_WORDS:
        raise ValueError(f"distance_words must be >= {BodyWriter.RECALL_CUE_WORDS}, got {distance_words}")
    sender, recipient = rng.sample(cast(), 2)
    writer = BodyWriter(rng, (sender, recipient), _START + timedelta(days=rng.randrange(0, 300)), "request")
    text, ref = writer.recall_body(sender, recipient, distance_words)
    return MemoryEmail(text, ref)


def memory_emails(count: int, distance_words: int, seed: int = 0) -> list[MemoryEmail]:
    """`count` recall probes at one distance, reproducible from `seed` (the same seed and distance give
    the same probes)."""
    rng = random.Random(f"memory:{seed}:{distance_words}")  # str seeds hash with SHA-512: stable across runs
    return [memory_email(rng, distance_words) for _ in range(count)]
