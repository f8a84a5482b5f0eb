"""`seqlab serve --learn --sent SOURCE`: the person's Sent folder read while the server learns, against a real
Dovecot (tests/imap_server.py) filled by IMAP APPEND, and a local Sent mbox appended to as a mail client does.

Only mail sent after the first start is kept; an email the extension already sent is kept once; a restarted
server reads on from where it was; the password is in no file of the run and not in /health."""

from __future__ import annotations

import json
import mailbox
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from email.utils import formatdate
from pathlib import Path

import pytest
from imap_server import PASSWORD, USER, Dovecot, dovecot_server
from mail_samples import ENVELOPE
from serving_helpers import ready_client

from seqlab.data.mail.imap_auth import ImapOptions
from seqlab.serving.app import ServerConfig
from seqlab.serving.learner import LearnSettings
from seqlab.serving.personal import PERSONAL, SENT
from seqlab.serving.sent_folder import POSITION, open_sent_source

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = LearnSettings(idle_s=0.05, swap_every=2, passes=1)
EVERY = 0.2  # seconds between two reads of the folder


def message(subject: str, body: str, date: str | None = None) -> bytes:
    head = (f"From: Sam <sam@example.org>\nTo: Dana <dana@example.org>\nSubject: {subject}\n"
            f"Date: {date or formatdate(localtime=True)}\nMessage-ID: <{abs(hash((subject, body)))}@example.org>\n"
            "MIME-Version: 1.0\nContent-Type: text/plain; charset=utf-8\n\n")
    return (head + body + "\n").encode()


OLD = message("Last year's report", "The report from last year is in the shared folder.",
              date="Mon, 02 Jan 2023 09:00:00 +0000")
BEFORE = message("Before the server", "This was sent before the server was started, so it is not learned.")
BY_EXTENSION = ("Freight totals", "Hi Dana,\n\nCould you check the freight totals before Friday?\n\nThanks, Sam")
FROM_PHONE = ("Running late", "I am running about ten minutes late for the harbour meeting, start without me.")
AFTER_RESTART = ("Minutes", "The minutes of this morning's meeting are attached; corrections welcome.")


@pytest.fixture(scope="module")
def server() -> Iterator[Dovecot]:
    with dovecot_server() as d:
        d.append("Sent", [BEFORE, OLD])
        yield d


@pytest.fixture
def run(tiny_run_dir: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(tiny_run_dir, out, ignore=shutil.ignore_patterns("serve", PERSONAL))
    return out


def stored(run: Path) -> list[dict]:
    path = run / PERSONAL / SENT
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def wait(predicate, seconds: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


def imap_config(run: Path, server: Dovecot, monkeypatch: pytest.MonkeyPatch, folder: str = "Sent") -> ServerConfig:
    monkeypatch.setenv("SEQLAB_IMAP_PASSWORD", PASSWORD)
    sent = open_sent_source(f"imaps://{USER}@127.0.0.1:{server.port}/{folder}",
                            ImapOptions(ca_file=str(server.ca_file)))
    monkeypatch.delenv("SEQLAB_IMAP_PASSWORD")  # asked once: the server never reads it again
    return ServerConfig(run, min_confidence=0.0, log_dir=run / "serve", learn=True, learn_settings=SETTINGS,
                        sent=sent, sent_every_s=EVERY)


def polled(client) -> dict:  # type: ignore[no-untyped-def]
    return client.get("/health").json()["learning"]["sent_folder"]


def test_new_mail_in_the_imap_sent_folder_is_learned_once_and_a_restart_reads_on(
        server: Dovecot, run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    origin = f"imap:127.0.0.1:{server.port}/Sent"
    with ready_client(imap_config(run, server, monkeypatch)) as client:
        wait(lambda: polled(client)["last_poll"] is not None)
        assert stored(run) == []  # the mail already in the folder is not the person's new writing
        r = client.post("/v1/sent", json={"subject": BY_EXTENSION[0], "body": BY_EXTENSION[1]})
        assert r.status_code == 200
        server.append("Sent", [message(*BY_EXTENSION), message(*FROM_PHONE)])
        wait(lambda: len(stored(run)) == 2 and polled(client)["duplicates"] == 1)
        wait(lambda: client.get("/health").json()["learning"]["learned_emails"] == 2)
        # the extension sending an email the folder gave first: not stored again either
        again = client.post("/v1/sent", json={"subject": FROM_PHONE[0], "body": FROM_PHONE[1]})
        assert again.status_code == 200 and again.json()["stored"] is False and len(stored(run)) == 2
        health = client.get("/health").text
        assert polled(client)["error"] is None and polled(client)["source"] == origin
    assert [(e["subject"], e["origin"]) for e in stored(run)] == [(BY_EXTENSION[0], "person"),
                                                                 (FROM_PHONE[0], origin)]
    assert stored(run)[1]["body"] == FROM_PHONE[1]
    # a restart reads on from where it was: nothing stored again, the next email kept
    with ready_client(imap_config(run, server, monkeypatch)) as client:
        server.append("Sent", [message(*AFTER_RESTART)])
        wait(lambda: len(stored(run)) == 3)
        time.sleep(5 * EVERY)  # more reads: each finds nothing new
        assert polled(client)["stored"] == 1 and polled(client)["duplicates"] == 0
    assert [e["subject"] for e in stored(run)] == [BY_EXTENSION[0], FROM_PHONE[0], AFTER_RESTART[0]]
    # the password is kept nowhere: not in the run, not in what /health says
    assert PASSWORD not in health
    for path in run.rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), path
    assert (run / PERSONAL / POSITION).stat().st_mode & 0o077 == 0
    done = subprocess.run([sys.executable, "-m", "seqlab", "forget", str(run)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and f"{PERSONAL}/{POSITION}" in done.stdout and not (run / PERSONAL).exists()


def test_a_lost_folder_is_reported_and_a_new_uidvalidity_brings_back_no_old_mail(
        server: Dovecot, run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The folder deleted under a running server, then made again (as a server migration does: a new
    UIDVALIDITY): /health says what failed meanwhile, the server goes on, and the folder read again whole
    stores only the one new email, neither the old mail nor what was stored before the reset again."""
    server.append("Moved", [OLD])
    with ready_client(imap_config(run, server, monkeypatch, "Moved")) as client:
        wait(lambda: polled(client)["last_poll"] is not None)
        server.append("Moved", [message(*FROM_PHONE)])
        wait(lambda: len(stored(run)) == 1)
        conn = server.client()
        try:
            assert conn.delete("Moved")[0] == "OK"
        finally:
            conn.logout()
        wait(lambda: polled(client)["error"] is not None)
        assert "Moved" in polled(client)["error"] and PASSWORD not in polled(client)["error"]
        assert client.get("/health").json()["status"] == "ok"
        server.append("Moved", [OLD, message(*FROM_PHONE), message(*AFTER_RESTART)])
        wait(lambda: polled(client)["error"] is None and len(stored(run)) == 2, seconds=120)
        assert polled(client)["duplicates"] == 1
    assert [e["subject"] for e in stored(run)] == [FROM_PHONE[0], AFTER_RESTART[0]]


def test_a_local_sent_mbox_appended_to_is_learned(run: Path, tmp_path: Path) -> None:
    mbox = tmp_path / "Sent"
    mbox.write_bytes(ENVELOPE + BEFORE + b"\n")
    config = ServerConfig(run, min_confidence=0.0, log_dir=run / "serve", learn=True, learn_settings=SETTINGS,
                          sent=open_sent_source(str(mbox)), sent_every_s=EVERY)
    with ready_client(config) as client:
        wait(lambda: polled(client)["last_poll"] is not None)
        with open(mbox, "ab") as f:  # as a mail client appends to its Sent mbox
            f.write(ENVELOPE + message(*FROM_PHONE) + b"\n")
        wait(lambda: len(stored(run)) == 1)
    assert [(e["subject"], e["origin"]) for e in stored(run)] == [(FROM_PHONE[0], f"file:{mbox.resolve()}")]


def test_a_new_empty_sent_maildir_is_watched_and_its_new_mail_learned(run: Path, tmp_path: Path) -> None:
    maildir = mailbox.Maildir(tmp_path / "Sent", create=True)  # no mail yet: a folder just made
    config = ServerConfig(run, min_confidence=0.0, log_dir=run / "serve", learn=True, learn_settings=SETTINGS,
                          sent=open_sent_source(str(tmp_path / "Sent")), sent_every_s=EVERY)
    with ready_client(config) as client:
        wait(lambda: polled(client)["last_poll"] is not None)
        maildir.add(message(*FROM_PHONE))
        wait(lambda: len(stored(run)) == 1)
        assert polled(client)["error"] is None
    assert stored(run)[0]["subject"] == FROM_PHONE[0]


def serve(run: Path, *args: str, password: str = PASSWORD) -> subprocess.CompletedProcess:
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("SEQLAB_IMAP_")}
    return subprocess.run([sys.executable, "-m", "seqlab", "serve", str(run), "--port", "0", *args], cwd=ROOT,
                          env={**env, "SEQLAB_IMAP_PASSWORD": password}, capture_output=True, text=True, timeout=120)


def test_sent_needs_learn_and_a_wrong_password_stops_serve(server: Dovecot, run: Path, tmp_path: Path) -> None:
    alone = serve(run, "--sent", str(tmp_path))
    assert alone.returncode == 2 and "add --learn" in alone.stderr and "Traceback" not in alone.stderr
    wrong = "not the password 42"
    refused = serve(run, "--learn", "--sent", f"imaps://{USER}@127.0.0.1:{server.port}/Sent", "--ca-file",
                    str(server.ca_file), password=wrong)
    assert refused.returncode == 2 and "refused the login" in refused.stderr, refused.stderr
    assert wrong not in refused.stderr + refused.stdout and "Traceback" not in refused.stderr
    assert not (run / "serve" / "server.json").exists()  # stopped before it bound or wrote anything
    missing = serve(run, "--learn", "--sent", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "no such file" in missing.stderr
