"""Threads, the stage after dedupe: what threading needs of each email, and the split of a thread.

The lecture's rule "split whole emails before forming training examples" (lecture notes, opening summary) is
enforced one level stricter: whole *threads* go to one split, because a reply quotes, paraphrases and
repeats its parent, so a reply in val whose parent is in train leaks.

A thread is a connected component of (a) In-Reply-To/References links and (b) "same normalized subject
and same participant set" among messages that carry no In-Reply-To/References header at all. The subject
rule lets replies from clients that drop threading headers join their thread. Messages with an empty
normalized subject are never joined by subject, since an empty subject says nothing about the
conversation.

- `ThreadMeta` is the few header fields threading needs, computed in a worker; `threadtable.py` links
  them on compact digest tables (tests/slow_threads.py keeps the union-find definition it is held to).
- `split_for_thread` maps a thread key to a split with a hash of (seed, key) alone, so a thread's split
  never depends on which other threads exist.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from seqlab.data.layout import SPLITS
from seqlab.data.mail.records import Email

__all__ = ["DEFAULT_FRACTIONS", "ThreadMeta", "check_fractions", "norm_id", "normalize_subject", "split_for_thread",
           "subject_thread_key", "utc_date"]

DEFAULT_FRACTIONS: tuple[float, float, float] = (0.9, 0.05, 0.05)

# Reply/forward markers in several mail clients' languages: Re, Fwd, Fw (English), AW/WG (German),
# SV (Scandinavian), Antw (Dutch); with an optional counter as in "Re[2]:" or "Re(3):".
_PREFIX = re.compile(r"^(?:re|fwd|fw|aw|wg|sv|antw)\s*(?:\[\d+\]|\(\d+\))?\s*:\s*")
# Mailing-list tags such as "[spamassassin-talk]" in front of the subject.
_LIST_TAG = re.compile(r"^\[[^\]]*\]\s*")
_SURROGATES = re.compile("[\ud800-\udfff]")


def _collapse(s: str) -> str:
    """Collapse every run of Unicode whitespace to one space and strip the ends."""
    return " ".join(s.split())


@functools.lru_cache(maxsize=256)  # a worker asks twice per email (dedupe key, thread meta); subjects repeat
def normalize_subject(s: str) -> str:
    """Subject for threading and duplicate detection: case folded, whitespace collapsed, reply and
    forward prefixes and [list-tags] stripped repeatedly ("Re: [x] Fwd: Hi" -> "hi").

    Case folding comes first so that no folded character can form a new prefix afterwards; this keeps
    the function idempotent (property-tested).
    """
    s = _collapse(s.casefold())
    while True:
        stripped = _LIST_TAG.sub("", _PREFIX.sub("", s, count=1), count=1)
        stripped = _collapse(stripped)
        if stripped == s:
            return s
        s = stripped


def norm_id(s: str | None) -> str:
    """Message-IDs compare without surrounding whitespace and angle brackets."""
    return (s or "").strip().strip("<>").strip()


def utc_date(s: str | None) -> str | None:
    """ISO 8601 date as a sortable UTC string ("YYYY-MM-DDTHH:MM:SS"), or None when absent or bad."""
    if not s:
        return None
    try:
        d = datetime.fromisoformat(s)
    except ValueError:
        return None
    if d.tzinfo is not None:
        d = d.astimezone(UTC).replace(tzinfo=None)
    return d.strftime("%Y-%m-%dT%H:%M:%S")


@dataclass(frozen=True)
class ThreadMeta:
    """What threading needs from one email; small enough to keep for every email of a large corpus."""

    id: str
    message_id: str | None
    in_reply_to: str | None
    references: tuple[str, ...]
    subject_norm: str
    participants: frozenset[str]
    date: str | None = None  # ISO 8601; orders candidate roots so that later mail keeps the key

    @classmethod
    def from_email(cls, email: Email) -> ThreadMeta:
        people = {a.strip().casefold() for a in [email.sender, *email.recipients]}
        return cls(
            id=email.id,
            message_id=email.message_id,
            in_reply_to=email.in_reply_to,
            references=tuple(email.references),
            subject_norm=normalize_subject(email.subject),
            participants=frozenset(p for p in people if p),
            date=email.date,
        )

    @property
    def node(self) -> str:
        """This message's node: its Message-ID, else its record id."""
        return norm_id(self.message_id) or self.id

    def header_edges(self) -> list[tuple[str, str]]:
        """(parent, child) pairs this message asserts through References, In-Reply-To and its ids."""
        chain = [r for r in (norm_id(x) for x in self.references) if r]
        irt = norm_id(self.in_reply_to)
        if irt and (not chain or chain[-1] != irt):
            chain.append(irt)
        nodes = [*chain, self.node]
        edges = [(p, c) for p, c in zip(nodes, nodes[1:]) if p != c]
        if self.id != self.node:
            # The record id differs from the Message-ID (e.g. a content hash): same email, same thread.
            edges.append((self.node, self.id))
        return edges

    def subject_key(self) -> str | None:
        """Subject-join key for a message with no threading headers and a non-empty subject."""
        if self.references or norm_id(self.in_reply_to) or not self.subject_norm:
            return None
        return subject_thread_key(self.subject_norm, self.participants)


def subject_thread_key(subject_norm: str, participants: frozenset[str]) -> str:
    """Key shared by header-less messages with the same normalized subject and participant set."""
    h = hashlib.sha256(_SURROGATES.sub("\ufffd", subject_norm).encode("utf-8"))
    for p in sorted(participants):
        h.update(b"\0" + _SURROGATES.sub("\ufffd", p).encode("utf-8"))
    return "subject:" + h.hexdigest()[:32]


def check_fractions(fractions: Sequence[float]) -> tuple[float, float, float]:
    if len(fractions) != 3 or any(not (f >= 0.0) for f in fractions):
        raise ValueError(f"split fractions must be three non-negative numbers, not {tuple(fractions)}")
    total = float(sum(fractions))
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"split fractions must sum to 1, not {tuple(fractions)} (sum {total})")
    return (float(fractions[0]), float(fractions[1]), float(fractions[2]))


def split_for_thread(thread_key: str, seed: int, fractions: Sequence[float] = DEFAULT_FRACTIONS) -> str:
    """"train", "val" or "test" for a thread, from sha256(f"{seed}:{key}") mapped to [0, 1).

    Depends on nothing but (seed, key, fractions), so adding other threads never moves this one. A split
    with fraction 0 is never chosen, even when rounding leaves the cumulative sum just below 1.
    """
    fr = check_fractions(fractions)
    key = _SURROGATES.sub("\ufffd", f"{seed}:{thread_key}").encode("utf-8")
    # 53 bits: exactly representable as a float in [0, 1).
    u = (int.from_bytes(hashlib.sha256(key).digest()[:8], "big") >> 11) / float(1 << 53)
    cumulative = 0.0
    last = None
    for name, f in zip(SPLITS, fr):
        if f <= 0.0:
            continue
        cumulative += f
        last = name
        if u < cumulative:
            return name
    assert last is not None  # fractions sum to 1, so one is positive
    return last
