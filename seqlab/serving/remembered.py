"""What the server's memory of the person holds (`generation.memory.WritingMemory`), and from where.

The server serves one person, so it keeps one memory of their writing, in RAM only (nothing new is
written: the mail stays where it was):

- with `seqlab serve --memory DATA_DIR`, the train split of the person's prepared mail, decoded with the
  run's tokenizer (a DATA_DIR prepared with another tokenizer is refused: its ids mean other text);
- with --learn, every email of the personal store (RUN_DIR/personal/sent.jsonl), and each new one the
  moment it is stored (`PersonalStore.listeners`: /v1/sent and the Sent folder share that intake).

Each email is labelled with its subject and date: the why panel of the compose page names the email a
suggestion came from (the extension is told only that it came from the person's earlier mail).
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import Tokenizer, load_tokenizer
from seqlab.errors import UserError
from seqlab.generation.memory import WritingMemory
from seqlab.serving.personal import PersonalStore, SentEmail

SUBJECT_CHARS = 80  # of a subject in a label


def label(subject: str, date: str | None) -> str:
    """"subject (date)" for the why panel; "(no subject)" for an empty one."""
    subject = " ".join(subject.split()) or "(no subject)"
    if len(subject) > SUBJECT_CHARS:
        subject = subject[: SUBJECT_CHARS - 1] + "…"
    return f"{subject} ({date})" if date else subject


def sent_label(email: SentEmail) -> str:
    """The label of an email of the personal store: its subject and when it was stored (local time)."""
    return label(email.subject, time.strftime("%Y-%m-%d %H:%M", time.localtime(email.t)) if email.t else None)


def _dates(data_dir: Path, split: str, count: int) -> list[str | None]:
    """The date (YYYY-MM-DD) of each email of `split` from emails.jsonl, None where unknown or unreadable."""
    path = data_dir / "emails.jsonl"
    dates: list[str | None] = []
    if path.is_file():
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and row.get("split") == split:
                    dates.append(_day(row.get("date")))
    return dates if len(dates) == count else [None] * count


def _day(iso: object) -> str | None:
    if not isinstance(iso, str) or not iso:
        return None
    try:
        return datetime.fromisoformat(iso).strftime("%Y-%m-%d")
    except ValueError:
        return None


def check_data_dir(data_dir: Path, tokenizer: Tokenizer, split: str = "train") -> None:
    """UserError for a folder that is not prepared, or prepared with another tokenizer than `tokenizer`."""
    path = data_dir / "tokenizer.json"
    if not path.is_file():
        raise UserError(f"{data_dir} is not a prepared data folder (no tokenizer.json); run `seqlab prepare` first")
    theirs = load_tokenizer(path)
    if theirs.vocab_size != tokenizer.vocab_size or theirs.sha256() != tokenizer.sha256():
        raise UserError(f"{data_dir} was prepared with another tokenizer than the run's; prepare the person's mail "
                        "with the run's tokenizer to use it as --memory")
    TokenStore(data_dir, split)  # its files read and checked


def data_emails(data_dir: Path, tokenizer: Tokenizer, split: str = "train") -> list[tuple[str, str]]:
    """(text, label) of each email of DATA_DIR's `split`, decoded with `tokenizer` (the run's); UserError
    as `check_data_dir`."""
    check_data_dir(data_dir, tokenizer, split)
    store = TokenStore(data_dir, split)
    texts = [tokenizer.decode(store.email(i).tolist()) for i in range(store.num_emails)]
    dates = _dates(data_dir, split, len(texts))
    return [(t, label(t.partition("\n\n")[0], d)) for t, d in zip(texts, dates)]


def build_memory(emails: list[tuple[str, str]], store: PersonalStore | None) -> WritingMemory:
    """A memory of `emails` (text, label), then of the store's emails in the order sent (newest last)."""
    memory = WritingMemory()
    for text, name in emails:
        memory.add(text, name)
    if store is not None:
        for e in store.emails():
            memory.add_body(e.body, sent_label(e))
    return memory
