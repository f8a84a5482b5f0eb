"""The person's own writing, kept for `seqlab serve --learn`: the emails they sent, and the weights learned
from them.

    RUN_DIR/personal/            0700
        sent.jsonl               0600, one email a line: {"t", "subject", "body", "context"?}; append-only
        learned.safetensors      0600, the model fine-tuned on them (`learner.Learner`)
        learned.json             0600, what those weights are: the base weights' digest, steps, emails seen

Each email is one `os.write` of a whole line followed by `fsync`, so a kill loses at most the email being
written and never tears an earlier one; a torn last line is skipped when read back. Without --learn the
server never creates this folder: it stores no text. `forget` deletes the folder, and with it every trace of
what was learned; the server then serves the trained model again.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PERSONAL = "personal"
SENT = "sent.jsonl"
LEARNED = "learned.safetensors"
LEARNED_META = "learned.json"


@dataclass(frozen=True)
class SentEmail:
    """One email the person finished, as the model reads it (subject, blank line, body) and what it answered."""

    subject: str
    body: str
    context: str | None = None
    t: float = 0.0


class PersonalStore:
    """The append-only store of sent emails in RUN_DIR/personal/sent.jsonl; safe to share between threads."""

    def __init__(self, run_dir: Path | str) -> None:
        self.folder = Path(run_dir) / PERSONAL
        self.path = self.folder / SENT
        self._lock = threading.Lock()
        self._count: int | None = None  # emails stored, read once

    def append(self, subject: str, body: str, context: str | None = None) -> int:
        """Store one sent email durably (written whole and fsync'd before this returns); the emails stored."""
        record: dict[str, Any] = {"t": time.time(), "subject": subject, "body": body}
        if context:
            record["context"] = context
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8", "replace")
        with self._lock:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                torn = os.fstat(fd).st_size > 0 and not _ends_with_newline(self.path)
                data = b"\n" + line if torn else line  # a line torn by a kill stays alone
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            if self._count is None:
                self._count = len(self._read())
            else:
                self._count += 1
            return self._count

    def __len__(self) -> int:
        with self._lock:
            if self._count is None:
                self._count = len(self._read())
            return self._count

    def emails(self) -> list[SentEmail]:
        """Every stored email in the order sent (torn or foreign lines skipped)."""
        with self._lock:
            return self._read()

    def _read(self) -> list[SentEmail]:
        if not self.path.is_file():
            return []
        out = []
        with open(self.path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    r = json.loads(line)
                    out.append(SentEmail(str(r["subject"]), str(r["body"]), r.get("context"), float(r.get("t", 0))))
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue
        return out


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, 2)
        return f.read(1) == b"\n"


def forget(run_dir: Path | str) -> list[str]:
    """Delete RUN_DIR/personal (the sent emails and the learned weights); the names of the files removed."""
    folder = Path(run_dir) / PERSONAL
    if not folder.exists():
        return []
    removed = sorted(p.name for p in folder.iterdir())
    shutil.rmtree(folder)
    return removed
