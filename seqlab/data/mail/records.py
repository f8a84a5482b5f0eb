"""The records that flow through the data pipeline: one `Email` per kept message, and the skip report."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Email:
    """One kept message, cleaned. `text()` is what the model is trained on."""

    id: str  # Message-ID without angle brackets, else "sha256:<hex>" of the raw content
    # thread key from headers (root of References / In-Reply-To, else own id); prepare's thread table refines it
    thread: str
    subject: str
    body: str  # cleaned body: quotes, forwards and signature removed unless asked to keep them
    sender: str = ""  # normalized address, lower case
    recipients: list[str] = field(default_factory=list)  # normalized addresses (To + Cc)
    date: str | None = None  # ISO 8601 when the Date header parses
    message_id: str | None = None
    in_reply_to: str | None = None
    references: list[str] = field(default_factory=list)
    source: str = ""  # where it came from: a path, path:index for mbox/CSV rows
    context: str = ""  # the replied-to text its quoted part holds, cleaned (mail/quoted.py); "" when none

    def text(self) -> str:
        """Training text: the subject line, a blank line, the cleaned body (other headers are dropped)."""
        return f"{self.subject}\n\n{self.body}"

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class SkipReport:
    """Counts every message seen: each one is either kept or skipped under a named reason."""

    seen: int = 0
    kept: int = 0
    skipped: Counter = field(default_factory=Counter)

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1

    @property
    def total_skipped(self) -> int:
        return sum(self.skipped.values())
