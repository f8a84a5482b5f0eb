"""Dedupe, the first stage after reading: an email equal to one kept before is dropped and counted.

Definitions (the split guarantees are stated in these terms and tested):

- exact duplicate: same normalized sender, normalized subject and normalized body as a kept email.
- duplicate body: normalized body of at least `MIN_DUPLICATE_BODY_CHARS` characters equal to the
  normalized body of a kept email. Shorter bodies ("Thanks!", "ok", "") are ordinary, independent
  replies and are not treated as duplicates; the guarantee "no duplicate body in two splits" covers
  every normalized body of at least that length. Only the first copy (in input order) is kept.

`Deduper` remembers only 8 bytes per kept email (16 when the body is long enough to count as a duplicate
body): the first 8 bytes of its 16-byte digests, in `digests.DigestSet`s. Workers compute the digests
(`Deduper.keys`, pure); the main process checks them in input order (`Deduper.check_keys`).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from seqlab.data.mail.records import Email
from seqlab.data.prepare.digests import DigestSet, bytes_key
from seqlab.data.prepare.thread_keys import normalize_subject

__all__ = ["MIN_DUPLICATE_BODY_CHARS", "Deduper", "normalize_body"]

MIN_DUPLICATE_BODY_CHARS = 20
_SURROGATES = re.compile("[\ud800-\udfff]")


def normalize_body(s: str) -> str:
    """Body for duplicate detection: case folded, every whitespace run collapsed to one space."""
    return " ".join(s.casefold().split())


def _digest(*parts: str) -> bytes:
    """16-byte digest of the parts; NUL separators keep ("ab", "c") and ("a", "bc") apart."""
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        # Lone surrogates cannot be UTF-8 encoded; they never reach here from the reader, but a
        # hand-built record must not crash the deduper.
        try:
            data = part.encode("utf-8")
        except UnicodeEncodeError:
            data = _SURROGATES.sub("\ufffd", part).encode("utf-8")
        h.update(data)
        h.update(b"\0")
    return h.digest()


@dataclass
class Deduper:
    """Streaming duplicate filter: feed emails in input order, keep those for which `check_keys` is None.

    Memory per kept email is 8 or 16 bytes (`digests.py`: the chance that two different emails share a
    64-bit key); bodies are never stored.
    """

    min_body_chars: int = MIN_DUPLICATE_BODY_CHARS
    counts: Counter = field(default_factory=Counter)  # keys: "kept", "duplicate", "duplicate_body", "held"
    _exact: DigestSet = field(default_factory=DigestSet, repr=False)
    _bodies: DigestSet = field(default_factory=DigestSet, repr=False)
    # `prepare --update`: the keys of the mail the DATA_DIR already holds, counted apart as "held"
    _held: tuple[DigestSet, DigestSet] | None = field(default=None, repr=False)

    @classmethod
    def holding(cls, exact: np.ndarray, bodies: np.ndarray) -> Deduper:
        """A deduper that also drops what a DATA_DIR holds (its keys, `keys_held`), counted as "held"."""
        return cls(_held=(DigestSet.from_array(exact), DigestSet.from_array(bodies)))

    def keys_held(self) -> tuple[np.ndarray, np.ndarray]:
        """(exact, body) keys of every email kept, the held ones included: each sorted uint64."""
        exact, bodies = self._exact.array(), self._bodies.array()
        if self._held is not None:
            exact, bodies = (np.sort(np.concatenate((h.array(), a))) for h, a in zip(self._held, (exact, bodies)))
        return exact, bodies

    def keys(self, email: Email) -> tuple[bytes, bytes | None]:
        """The (exact, body) digests `check_keys` compares; pure, so parallel workers can compute them."""
        body = normalize_body(email.body)
        exact = _digest(email.sender.strip().casefold(), normalize_subject(email.subject), body)
        return exact, (_digest(body) if len(body) >= self.min_body_chars else None)

    def check_keys(self, exact: bytes, body_key: bytes | None) -> str | None:
        """None for a new email (remembered), else the duplicate reason."""
        exact_key = bytes_key(exact)
        body = None if body_key is None else bytes_key(body_key)
        if self._held is not None and (exact_key in self._held[0] or (body is not None and body in self._held[1])):
            self.counts["held"] += 1
            return "held"
        if exact_key in self._exact:
            self.counts["duplicate"] += 1
            return "duplicate"
        if body is not None and body in self._bodies:
            self.counts["duplicate_body"] += 1
            return "duplicate_body"
        self._exact.add(exact_key)
        if body is not None:
            self._bodies.add(body)
        self.counts["kept"] += 1
        return None

    @property
    def nbytes(self) -> int:
        """Bytes held by the digest arrays (each set also buffers up to 16,384 recent keys)."""
        return self._exact.nbytes + self._bodies.nbytes
