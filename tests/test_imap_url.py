"""The IMAP source's address and secrets without a server: URL parsing (a login with @, ports, folders, a
password refused), modified UTF-7 folder names (RFC 3501's own examples), the secret's sources, redaction, and
every imaps:// URL the docs show."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest

from seqlab.data.mail.imap import FolderState, _folder_states, check_transport
from seqlab.data.mail.imap_auth import ImapOptions, read_secret, redact, xoauth2
from seqlab.data.mail.imap_url import encode_mailbox, is_imap_url, parse_imap_url, quote_mailbox
from seqlab.errors import UserError

ROOT = Path(__file__).resolve().parent.parent


def test_urls_parse_into_user_host_port_and_folders() -> None:
    u = parse_imap_url("imaps://you%40gmail.com@imap.gmail.com/INBOX,%5BGmail%5D/Sent%20Mail")
    assert (u.scheme, u.user, u.host, u.port) == ("imaps", "you@gmail.com", "imap.gmail.com", 993)
    assert u.folders == ("INBOX", "[Gmail]/Sent Mail")
    # an unencoded @ in the login is read the same way: the host follows the last one
    assert parse_imap_url("imaps://you@gmail.com@imap.gmail.com").user == "you@gmail.com"
    assert parse_imap_url("imaps://me@host").folders == ("INBOX",)
    assert parse_imap_url("IMAP://me@[::1]:1143/A%2CB,C").port == 1143
    assert parse_imap_url("imap://me@[::1]:1143/A%2CB,C").folders == ("A,B", "C")
    assert parse_imap_url("imap://me@[::1]/x").loopback and parse_imap_url("imap://me@localhost/x").loopback
    assert not parse_imap_url("imap://me@127.0.0.1.example.org/x").loopback
    assert is_imap_url(" imaps://x@y") and not is_imap_url("/home/me/imaps://x")


@pytest.mark.parametrize("bad,says", [
    ("imaps://me:hunter2@host/INBOX", "password in the IMAP source's URL is refused"),
    ("imaps://host/INBOX", "names no user"),
    ("imaps://me@/INBOX", "names no host"),
    ("imaps://me@host:99999/INBOX", "port must be a number"),
    ("imaps://me@host:12ab/INBOX", "port must be a number"),
    ("imaps://me@host/INBOX?x=1", "no query"),
    ("imaps://me@host/INBOX,,Sent", "empty or holds control characters"),
    ("imaps://me@host/IN%0ABOX", "empty or holds control characters"),
    ("pop3://me@host/INBOX", "imaps://USER@HOST"),
])
def test_bad_urls_are_one_sentence(bad: str, says: str) -> None:
    with pytest.raises(UserError) as err:
        parse_imap_url(bad)
    assert says in str(err.value) and "hunter2" not in str(err.value)


def test_folder_names_go_as_modified_utf7_quoted() -> None:
    # RFC 3501, 5.1.3's example, and the ampersand rule
    assert encode_mailbox("~peter/mail/\u53f0\u5317/\u65e5\u672c\u8a9e") == "~peter/mail/&U,BTFw-/&ZeVnLIqe-"
    assert encode_mailbox("Tom & Jerry") == "Tom &- Jerry"
    assert encode_mailbox("Entwürfe") == "Entw&APw-rfe"
    assert quote_mailbox('a "b" \\c') == '"a \\"b\\" \\\\c"'


def test_insecure_only_to_this_machine() -> None:
    check_transport(parse_imap_url("imap://me@127.0.0.1:1143/INBOX"), ImapOptions(insecure=True))
    for url in ("imap://me@mail.example.org/INBOX", "imap://me@10.0.0.1/INBOX"):
        with pytest.raises(UserError, match="--insecure is refused"):
            check_transport(parse_imap_url(url), ImapOptions(insecure=True))
    with pytest.raises(UserError, match="imaps:// always uses TLS"):
        check_transport(parse_imap_url("imaps://me@localhost/INBOX"), ImapOptions(insecure=True))


def test_the_secret_comes_from_env_then_command_then_nothing(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    monkeypatch.delenv("SEQLAB_IMAP_PASSWORD", raising=False)
    monkeypatch.delenv("SEQLAB_IMAP_TOKEN", raising=False)
    monkeypatch.setattr(sys, "stdin", io.StringIO())  # not a terminal: no prompt
    with pytest.raises(UserError, match="set SEQLAB_IMAP_PASSWORD"):
        read_secret(ImapOptions(), "me", "host")
    with pytest.raises(UserError, match="set SEQLAB_IMAP_TOKEN"):
        read_secret(ImapOptions(oauth2=True), "me", "host")
    command = f"{sys.executable} -c \"print('s3cret word'); print('line two')\""
    assert read_secret(ImapOptions(password_command=command), "me", "host") == "s3cret word"
    monkeypatch.setenv("SEQLAB_IMAP_PASSWORD", "from-env")
    assert read_secret(ImapOptions(password_command=command), "me", "host") == "from-env"
    monkeypatch.delenv("SEQLAB_IMAP_PASSWORD")
    for command, says in ((f"{sys.executable} -c 'raise SystemExit(3)'", "exited with status 3"),
                          ("no-such-program-here", "was not found"), ("'unclosed", "cannot be split"),
                          (f"{sys.executable} -c 'print()'", "empty first line")):
        with pytest.raises(UserError, match=says):
            read_secret(ImapOptions(password_command=command), "me", "host")
    with pytest.raises(UserError, match="is not a file"):
        ImapOptions(ca_file=str(tmp_path / "missing.pem"))


def test_server_text_in_errors_is_redacted_and_short() -> None:
    said = b"NO [AUTHENTICATIONFAILED] bad password hunter2 for\x1b[31m you" + b"x" * 500
    text = redact(said, "hunter2")
    assert "hunter2" not in text and "\x1b" not in text and len(text) <= 160
    assert xoauth2("me@x.org", "tok") == b"user=me@x.org\x01auth=Bearer tok\x01\x01"


def test_a_damaged_ledger_entry_reads_the_folder_whole() -> None:
    good = {"folders": {"INBOX": {"uidvalidity": 7, "last_uid": 40}, "Bad": {"uidvalidity": "7", "last_uid": 1},
                        "Neg": {"uidvalidity": 7, "last_uid": -1}, "List": [1, 2]}}
    assert _folder_states(good) == {"INBOX": FolderState("INBOX", 7, 40)}
    assert _folder_states(None) == {} == _folder_states({"folders": "x"}) == _folder_states([])  # type: ignore[arg-type]


def test_every_imap_url_in_the_docs_parses() -> None:
    text = (ROOT / "docs" / "data.md").read_text()
    urls = re.findall(r"'(imaps?://[^']+)'|(imaps?://[^\s`')]+)", text)
    # leaving out the syntax (USER@HOST), the scheme named alone and an email's label (a UID, not a source)
    found = [a or b for a, b in urls if not re.search(r"USER@HOST|://HOST|;UID", a or b)]
    assert len(found) >= 5
    for url in found:
        parse_imap_url(url)
