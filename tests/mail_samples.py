"""Mail written by the tests: one small message (`mail`), a 44-message corpus with duplicates and PII
(`corpus_messages`), and that corpus in every on-disk layout the readers accept (`write_layouts`).
"""

from __future__ import annotations

import csv
import mailbox
from pathlib import Path

from seqlab.data.synthetic.generator import synthetic_messages

ENVELOPE = b"From sender@example.com Mon Jan  8 09:00:00 2024\n"


def mail(subject: str, body: str, mid: str | None = None, extra: str = "") -> bytes:
    """One message from Alice to Bob: an optional Message-ID and `extra` header lines, a blank line, the body."""
    head = f"From: Alice Smith <Alice@Example.com>\nTo: bob@example.org\nSubject: {subject}\n"
    if mid:
        head += f"Message-ID: <{mid}>\n"
    return (head + extra + "\n" + body + "\n").encode()


def _message(mid: str, subject: str, body: str, sender: str = "Dana Ortiz <dana@harbour.example>") -> bytes:
    return (f"From: {sender}\nTo: Lee Park <lee@harbour.example>\nSubject: {subject}\nMessage-ID: <{mid}>\n"
            f"Date: Tue, 9 Jan 2024 10:00:00 +0000\n\n{body}\n").encode()


def corpus_messages() -> list[bytes]:
    """40 synthetic messages (threads with quotes), two kinds of duplicate, and one message full of PII."""
    msgs = [raw for _, raw in synthetic_messages(count=40, seed=3)]
    body = "Please move the budget review to Thursday; the auditors need the ledger first. Thanks, Dana"
    msgs.append(_message("dup-a@x", "Budget review", body))
    msgs.append(_message("dup-b@x", "Budget review", body))  # exact duplicate: same sender, subject, body
    msgs.append(_message("dup-c@x", "Re: something else", body, sender="kim@harbour.example"))  # same body
    msgs.append(_message("pii@x", "Contact details", "Write to carol.white@example.com or call +1 555 123 4567, "
                         "and see https://intranet.example.com/plan for the plan."))
    return msgs


def write_mbox(path: Path, msgs: list[bytes]) -> Path:
    """An mboxrd file: an envelope line before each message, body lines starting with "From " escaped."""
    with open(path, "wb") as f:
        for raw in msgs:
            f.write(ENVELOPE + raw.replace(b"\nFrom ", b"\n>From ").rstrip(b"\n") + b"\n\n")
    return path


def write_layouts(root: Path, msgs: list[bytes]) -> dict[str, Path]:
    """The same messages as an mbox, a Maildir, an .eml tree, an Enron tree and a Kaggle CSV; one file.

    Every layout lists the messages in the same order (which copy of a duplicate is kept depends on it).
    """
    paths = {"mbox": write_mbox(root / "mail.mbox", msgs)}
    md = mailbox.Maildir(root / "Maildir", create=True)
    md.add_folder("Archive")
    for i, raw in enumerate(msgs):
        # Written by hand so the unique names sort in input order; the last messages in a subfolder.
        folder = root / "Maildir" / ("cur" if i < 30 else ".Archive/cur")
        (folder / f"{i:04d}.test.host:2,S").write_bytes(raw)
    paths["maildir"] = root / "Maildir"
    for i, raw in enumerate(msgs):
        folder = root / "eml" / f"{i // 15}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:03d}.eml").write_bytes(raw)
        # Enron: maildir/<user>/<folder>/<n>. with CRLF line ends; at most 9 files a folder, so "10." never
        # sorts before "2.".
        enron = root / "enron" / "maildir" / f"user{i // 22}" / ("a_inbox", "b_sent", "c_notes")[(i % 22) // 9]
        enron.mkdir(parents=True, exist_ok=True)
        (enron / f"{i % 9 + 1}.").write_bytes(raw.replace(b"\n", b"\r\n"))
    paths["tree"], paths["enron"] = root / "eml", root / "enron"
    with open(root / "emails.csv", "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["file", "message"])
        for i, raw in enumerate(msgs):
            writer.writerow([f"user/inbox/{i}.", raw.decode("utf-8")])
    paths["csv"] = root / "emails.csv"
    paths["message"] = root / "one.eml"
    paths["message"].write_bytes(msgs[-1])
    return paths
