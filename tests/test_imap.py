"""`seqlab prepare imaps://...` against a real Dovecot on loopback (tests/imap_server.py), filled by IMAP APPEND.

The same mail prepared from the server and from an mbox gives the same DATA_DIR: every token file byte for byte,
emails.jsonl and meta.json equal but for where each email came from (`source`: an mbox offset there, an IMAP URL
with UIDVALIDITY and UID here; sources.json, --update's record of what was read, says it in its own terms).
Nothing on the server changes (no \\Seen). Faults as a person meets them: a wrong password, a missing folder,
plain IMAP to another host, a password in the URL, a connection cut mid-fetch.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile_mail import HEAVY, KINDS
from imap_server import (
    PASSWORD,
    USER,
    UTF8_PASSWORD,
    UTF8_USER,
    Dovecot,
    Introspection,
    TcpCutter,
    dovecot_server,
    free_port,
)
from mail_samples import corpus_messages, write_mbox

from seqlab.cli.main import main as cli_main
from seqlab.data.mail import mime
from seqlab.data.mail.imap import FolderState, ImapSource
from seqlab.data.mail.imap_auth import ImapOptions
from seqlab.data.mail.imap_url import encode_mailbox
from seqlab.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "ya29.a0-test-access-token"


def as_stored(raw: bytes) -> bytes:
    """A message as an mbox holds it after the envelope: `write_mbox` ends each with one blank line."""
    return raw.rstrip(b"\n") + b"\n\n"


def hostile_messages() -> list[bytes]:
    import random

    rng = random.Random(0)
    light = [build(rng) for name, (build, _) in KINDS.items() if name not in HEAVY]
    # IMAP APPEND carries no NUL byte (RFC 3501 literals are text), and an empty message is no message
    return [m for m in light if m.strip() and b"\0" not in m] + [KINDS["huge_message"][0](rng)]


@pytest.fixture(scope="module")
def introspection() -> Iterator[Introspection]:
    endpoint = Introspection(TOKEN)
    yield endpoint
    endpoint.close()


@pytest.fixture(scope="module")
def server(introspection: Introspection) -> Iterator[Dovecot]:
    with dovecot_server(introspection.url) as d:
        d.append("INBOX", [as_stored(m) for m in corpus_messages()])
        d.append("Hostile", hostile_messages())
        yield d


@pytest.fixture
def env(server: Dovecot, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name in ("SEQLAB_IMAP_PASSWORD", "SEQLAB_IMAP_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return {**os.environ, "SEQLAB_IMAP_PASSWORD": PASSWORD}


def url(server: Dovecot, folder: str = "INBOX", port: int | None = None) -> str:
    return f"imaps://{USER}@127.0.0.1:{port or server.port}/{folder}"


def seqlab(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "seqlab", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def without_source(folder: Path) -> dict[str, bytes | object]:
    """Every file of a DATA_DIR; emails.jsonl and meta.json without the fields that name the source."""
    out: dict[str, bytes | object] = {}
    for p in sorted(folder.iterdir()):
        if p.name == "sources.json":  # what was read where, for --update: files there, folders and UIDs here
            continue
        if p.name == "emails.jsonl":
            rows = [json.loads(line) for line in p.read_text().splitlines()]
            out[p.name] = [{k: v for k, v in r.items() if k != "source"} for r in rows]
        elif p.name == "meta.json":
            meta = json.loads(p.read_text())
            meta.pop("source", None)
            meta.get("prepare", {}).pop("source", None)
            out[p.name] = meta
        else:
            out[p.name] = p.read_bytes()
    return out


def flags(server: Dovecot, folder: str) -> list[bytes]:
    conn = server.client()
    try:
        conn.select(f'"{folder}"', readonly=True)
        _, data = conn.uid("FETCH", "1:*", "(FLAGS)")
        return sorted(line.replace(b"\\Recent", b"") for line in data)
    finally:
        conn.logout()


def test_imaps_prepare_equals_the_mbox_and_changes_no_flag(server: Dovecot, env: dict[str, str],
                                                            tmp_path: Path) -> None:
    before = flags(server, "INBOX")
    r = seqlab("prepare", url(server), "--out", str(tmp_path / "imap"), "--ca-file", str(server.ca_file),
               "--quiet", env=env)
    assert r.returncode == 0, r.stderr
    mbox = write_mbox(tmp_path / "mail.mbox", corpus_messages())
    assert cli_main(["prepare", str(mbox), "--out", str(tmp_path / "mbox"), "--quiet"]) == 0
    imap, local = without_source(tmp_path / "imap"), without_source(tmp_path / "mbox")
    assert imap == local and len(imap["emails.jsonl"]) == 42
    rows = [json.loads(line) for line in (tmp_path / "imap" / "emails.jsonl").read_text().splitlines()]
    assert all(row["source"].startswith(f"imaps://127.0.0.1:{server.port}/INBOX;UIDVALIDITY=") for row in rows)
    # what --update needs: the folder's UIDVALIDITY and the highest UID read
    ledger = json.loads((tmp_path / "imap" / "sources.json").read_text())["sources"][url(server)]
    assert ledger["folders"]["INBOX"]["last_uid"] == 44 and ledger["folders"]["INBOX"]["uidvalidity"] > 0
    # EXAMINE and BODY.PEEK[]: no message became \Seen, no flag changed
    after = flags(server, "INBOX")
    assert after == before and not any(b"\\Seen" in line for line in after)
    assert PASSWORD not in r.stdout + r.stderr
    assert not any(PASSWORD.encode() in p.read_bytes() for p in (tmp_path / "imap").iterdir())


def test_hostile_mail_over_imap_is_counted_as_from_an_mbox(server: Dovecot, env: dict[str, str],
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    options = ImapOptions(ca_file=str(server.ca_file))
    monkeypatch.setenv("SEQLAB_IMAP_PASSWORD", PASSWORD)
    source = ImapSource(url(server, "Hostile"), options)
    items = list(source)
    # the message over the reader's cap was never downloaded: it is a skip the reader counts
    assert [raw for _, raw in items if isinstance(raw, str)] == ["too_large"]
    mbox = write_mbox(tmp_path / "hostile.mbox", [as_stored(m) for m in hostile_messages()])
    assert cli_main(["prepare", str(mbox), "--out", str(tmp_path / "mbox"), "--quiet", "--workers", "1"]) == 0
    assert cli_main(["prepare", url(server, "Hostile"), "--ca-file", str(server.ca_file), "--out",
                     str(tmp_path / "imap"), "--quiet", "--workers", "1"]) == 0
    imap, local = (json.loads((tmp_path / d / "meta.json").read_text()) for d in ("imap", "mbox"))
    assert imap["skipped"] == local["skipped"] and imap["skipped"]["too_large"] == 1
    assert imap["kept"] == local["kept"] > 0
    assert mime.MAX_MESSAGE_BYTES < len(KINDS["huge_message"][0](None)) < 2 * mime.MAX_MESSAGE_BYTES


def test_since_reads_only_new_uids_and_a_new_uidvalidity_reads_all(server: Dovecot, env: dict[str, str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEQLAB_IMAP_PASSWORD", PASSWORD)
    options = ImapOptions(ca_file=str(server.ca_file))
    msgs = corpus_messages()
    server.append("Grow", msgs[:5])
    first = ImapSource(url(server, "Grow"), options)
    assert len(list(first)) == 5
    state = first.states["Grow"]
    assert state.last_uid == 5 and state.uidvalidity > 0 and not state.reset
    server.append("Grow", msgs[5:8])
    second = ImapSource(url(server, "Grow"), options, since={"Grow": state})
    labels = [label for label, _ in second]
    assert [label.rsplit("UID=", 1)[1] for label in labels] == ["6", "7", "8"]
    assert second.states["Grow"] == FolderState("Grow", state.uidvalidity, 8)
    nothing_new = ImapSource(url(server, "Grow"), options, since={"Grow": second.states["Grow"]})
    assert list(nothing_new) == [] and nothing_new.states["Grow"].last_uid == 8
    stale = FolderState("Grow", state.uidvalidity + 1000, 8)  # the server renumbered the folder since
    again = ImapSource(url(server, "Grow"), options, since={"Grow": stale})
    assert len(list(again)) == 8 and again.states["Grow"].reset


def test_wrong_password_exits_2_with_one_sentence_and_no_password(server: Dovecot, env: dict[str, str],
                                                                  tmp_path: Path) -> None:
    wrong = "not-the-password-42"
    r = seqlab("prepare", url(server), "--out", str(tmp_path / "d"), "--ca-file", str(server.ca_file),
               env={**env, "SEQLAB_IMAP_PASSWORD": wrong})
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "refused the login of tester" in lines[0] and "Traceback" not in r.stderr
    assert wrong not in r.stdout + r.stderr and PASSWORD not in r.stdout + r.stderr
    assert not (tmp_path / "d").exists() and list(tmp_path.iterdir()) == []


def test_missing_folder_and_bad_certificate_exit_2(server: Dovecot, env: dict[str, str], tmp_path: Path) -> None:
    r = seqlab("prepare", url(server, "NoSuchFolder"), "--out", str(tmp_path / "d"), "--ca-file",
               str(server.ca_file), env=env)
    assert r.returncode == 2 and "'NoSuchFolder' cannot be opened" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "d").exists()
    # without --ca-file the throwaway certificate is trusted by nobody
    r = seqlab("prepare", url(server), "--out", str(tmp_path / "d"), env=env)
    assert r.returncode == 2 and "could not be verified" in r.stderr and "--ca-file" in r.stderr
    assert PASSWORD not in r.stdout + r.stderr


def test_insecure_is_refused_off_this_machine_and_works_on_it(server: Dovecot, env: dict[str, str],
                                                              tmp_path: Path) -> None:
    r = seqlab("prepare", f"imap://{USER}@mail.example.org/INBOX", "--insecure", "--out", str(tmp_path / "d"),
               env=env)
    assert r.returncode == 2 and "--insecure is refused for mail.example.org" in r.stderr
    assert cli_main(["prepare", f"imap://{USER}@127.0.0.1:{server.plain_port}/INBOX", "--insecure", "--out",
                     str(tmp_path / "plain"), "--quiet"]) == 2  # no password in this process's environment
    r = seqlab("prepare", f"imap://{USER}@127.0.0.1:{server.plain_port}/INBOX", "--insecure", "--out",
               str(tmp_path / "plain"), "--quiet", env=env)
    assert r.returncode == 0, r.stderr


def test_a_password_in_the_url_is_refused_and_not_repeated(env: dict[str, str], tmp_path: Path) -> None:
    r = seqlab("prepare", "imaps://me:hunter2secret@imap.example.org/INBOX", "--out", str(tmp_path / "d"), env=env)
    assert r.returncode == 2 and "password in the IMAP source's URL is refused" in r.stderr
    assert "hunter2secret" not in r.stdout + r.stderr and not (tmp_path / "d").exists()


def test_password_command_runs_without_a_shell(server: Dovecot, env: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "pw.py"
    script.write_text(f"print({PASSWORD!r})\nprint('second line is ignored')\n")
    no_env = {k: v for k, v in env.items() if k != "SEQLAB_IMAP_PASSWORD"}
    r = seqlab("prepare", url(server), "--out", str(tmp_path / "d"), "--ca-file", str(server.ca_file), "--quiet",
               "--password-command", f"{sys.executable} {script}", env=no_env)
    assert r.returncode == 0, r.stderr
    # shell syntax is not interpreted: `;` is an argument to echo, so the "password" is the whole line
    marker = tmp_path / "injected"
    r = seqlab("prepare", url(server), "--out", str(tmp_path / "e"), "--ca-file", str(server.ca_file),
               "--password-command", f"echo x; touch {marker}", env=no_env)
    assert r.returncode == 2 and "refused the login" in r.stderr and not marker.exists()
    # no password anywhere and stdin not a terminal: a sentence, not a hang
    r = seqlab("prepare", url(server), "--out", str(tmp_path / "f"), "--ca-file", str(server.ca_file), env=no_env)
    assert r.returncode == 2 and "SEQLAB_IMAP_PASSWORD" in r.stderr


def test_a_connection_cut_mid_fetch_writes_nothing_and_a_rerun_succeeds(server: Dovecot, env: dict[str, str],
                                                                        tmp_path: Path) -> None:
    cutter = TcpCutter(server.port, cut_after=30_000)  # past the login, inside the message bodies
    try:
        out = tmp_path / "d"
        r = seqlab("prepare", url(server, port=cutter.port), "--out", str(out), "--ca-file", str(server.ca_file),
                   "--quiet", env=env)
        assert r.returncode == 2 and "was lost while reading 'INBOX'" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and cutter.cuts >= 1
        assert list(tmp_path.iterdir()) == []  # no DATA_DIR, no staging folder left behind
        cutter.cut_after = None
        r = seqlab("prepare", url(server, port=cutter.port), "--out", str(out), "--ca-file", str(server.ca_file),
                   "--quiet", env=env)
        assert r.returncode == 0, r.stderr
    finally:
        cutter.close()
    reference = tmp_path / "reference"
    r = seqlab("prepare", url(server), "--out", str(reference), "--ca-file", str(server.ca_file), "--quiet", env=env)
    assert r.returncode == 0
    # the source is another URL (the proxy's port): the files that name it differ, no other
    same = {p.name for p in out.iterdir() if p.name not in ("emails.jsonl", "meta.json", "sources.json")}
    assert same and all((out / n).read_bytes() == (reference / n).read_bytes() for n in same)


class LyingServer:
    """A plain IMAP server on loopback, a hostile or broken one: it answers EXAMINE, the FETCH of UIDs and
    sizes, and the UID FETCH of bodies with the bytes it is given (the tag's OK added), then hangs up."""

    EXAMINE = b"* 1 EXISTS\r\n* OK [UIDVALIDITY 7] ok\r\n"
    SIZES = b"* 1 FETCH (UID 1 RFC822.SIZE 100)\r\n"

    def __init__(self, bodies: bytes, examine: bytes = EXAMINE, sizes: bytes = SIZES) -> None:
        self.replies = {"EXAMINE": examine, "FETCH": sizes, "UID FETCH": bodies}
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        f = conn.makefile("rwb")
        f.write(b"* OK [CAPABILITY IMAP4rev1] ready\r\n")
        f.flush()
        for line in f:
            tag, _, rest = line.decode().strip().partition(" ")
            cmd = rest.upper()
            if cmd.startswith("CAPABILITY"):
                f.write(b"* CAPABILITY IMAP4rev1\r\n")
            for name in ("EXAMINE", "FETCH", "UID FETCH"):
                if cmd.startswith(name + " "):
                    f.write(self.replies[name])
            if cmd.startswith("LOGOUT"):
                f.write(b"* BYE\r\n")
            f.write(tag.encode() + b" OK done\r\n")
            f.flush()
            if cmd.startswith(("UID FETCH", "LOGOUT")):
                break
        conn.close()


def test_a_huge_literal_from_the_server_is_refused_before_it_is_read(env: dict[str, str], tmp_path: Path) -> None:
    # 50 GiB announced: imaplib alone allocates a buffer of the announced size before reading (MemoryError)
    server = LyingServer(b"* 1 FETCH (UID 1 BODY[] {%d}\r\n" % (50 * 1024**3) + b"x" * 1000)
    r = seqlab("prepare", f"imap://me@127.0.0.1:{server.port}/INBOX", "--insecure", "--out", str(tmp_path / "d"),
               "--quiet", env=env)
    assert r.returncode == 2 and "malformed reply while reading 'INBOX'" in r.stderr, r.stderr
    assert "literal of 53687091200 bytes" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bodies,examine,sizes,says", [
    (b"* 1 FETCH (UID 9 BODY[] {5}\r\nhello)\r\n", None, None, "UID 9, which was not asked for"),
    (b"* 1 FETCH (UID 1 BODY[] {%d}\r\n" % (5 * 1024**2) + b"x" * 100, None, None, "literal of 5242880 bytes"),
    (b"* 1 FETCH (BODY[] {5}\r\nhello)\r\n", None, None, "without its UID"),
    (b"* 1 FETCH (BODY[] {5}\r\nhello BODY[1] {2}\r\nxx UID 1)\r\n", None, None, "two literals"),
    (b"", b"* 1 EXISTS\r\n", None, "no UIDVALIDITY"),
    (b"", b"* OK [UIDVALIDITY 7] ok\r\n", None, "no EXISTS"),
    (b"", b"* 1 EXISTS\r\n* OK [UIDVALIDITY seven] ok\r\n", None, "malformed reply about 'INBOX'"),
    (b"", None, b"* 1 FETCH (UID 1 RFC822.SIZE {3}\r\n100)\r\n", "a literal where sizes were expected"),
    (b"* 1 FETCH (UID 1 BODY[] {5}\r\nhel", None, None, "was lost while reading 'INBOX' after 0 messages"),
])
def test_a_lying_server_is_one_sentence(bodies: bytes, examine: bytes | None, sizes: bytes | None, says: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    server = LyingServer(bodies, examine or LyingServer.EXAMINE, sizes or LyingServer.SIZES)
    monkeypatch.setenv("SEQLAB_IMAP_PASSWORD", "pw")
    source = ImapSource(f"imap://me@127.0.0.1:{server.port}/INBOX", ImapOptions(insecure=True, timeout_s=10))
    with pytest.raises(UserError) as err:
        list(source)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_oauth2_logs_in_with_the_token_and_a_bad_token_is_one_sentence(server: Dovecot, env: dict[str, str],
                                                                      introspection: Introspection,
                                                                      tmp_path: Path) -> None:
    no_password = {k: v for k, v in env.items() if k != "SEQLAB_IMAP_PASSWORD"}
    r = seqlab("prepare", url(server), "--oauth2", "--out", str(tmp_path / "d"), "--ca-file",
               str(server.ca_file), "--quiet", env={**no_password, "SEQLAB_IMAP_TOKEN": TOKEN})
    assert r.returncode == 0, r.stderr
    assert introspection.asked[-1] == TOKEN  # the server checked the token we sent, with XOAUTH2
    stale = "ya29.expired-token-123"
    r = seqlab("prepare", url(server), "--oauth2", "--out", str(tmp_path / "e"), "--ca-file", str(server.ca_file),
               env={**no_password, "SEQLAB_IMAP_TOKEN": stale})
    assert r.returncode == 2 and "refused the login of tester (wrong user or token?)" in r.stderr
    assert stale not in r.stdout + r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_update_reads_only_new_uids_and_a_uidvalidity_reset_reads_the_folder_again(
        server: Dovecot, env: dict[str, str], tmp_path: Path) -> None:
    msgs = corpus_messages()
    server.append("Upd", [as_stored(m) for m in msgs[:30]])
    data, args = tmp_path / "d", ("--ca-file", str(server.ca_file), "--quiet")
    r = seqlab("prepare", url(server, "Upd"), "--out", str(data), *args, env=env)
    assert r.returncode == 0, r.stderr
    server.append("Upd", [as_stored(m) for m in msgs[30:]])
    r = seqlab("prepare", url(server, "Upd"), "--update", str(data), *args, env=env)
    assert r.returncode == 0, r.stderr
    update = json.loads((data / "meta.json").read_text())["update"]
    assert update["seen"] == len(msgs) - 30 and update["held"] == 0  # only the new UIDs were fetched
    folder = json.loads((data / "sources.json").read_text())["sources"][url(server, "Upd")]["folders"]["Upd"]
    assert folder["last_uid"] == len(msgs)
    # The folder deleted and made again (as a server migration does): a new UIDVALIDITY, so every message
    # is read again, and dedupe finds each one already held.
    conn = server.client()
    try:
        assert conn.delete("Upd")[0] == "OK"
    finally:
        conn.logout()
    server.append("Upd", [as_stored(m) for m in msgs])
    r = seqlab("prepare", url(server, "Upd"), "--update", str(data), *args, env=env)
    assert r.returncode == 0, r.stderr
    update = json.loads((data / "meta.json").read_text())["update"]
    assert update["seen"] == len(msgs) and update["added"] == 0
    again = json.loads((data / "sources.json").read_text())["sources"][url(server, "Upd")]["folders"]["Upd"]
    assert again["uidvalidity"] != folder["uidvalidity"]


def test_a_non_ascii_folder_and_password(server: Dovecot, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = "Entwürfe & Ärger"
    server.append(encode_mailbox(folder), [as_stored(m) for m in corpus_messages()[:3]])
    monkeypatch.setenv("SEQLAB_IMAP_PASSWORD", PASSWORD)
    source = ImapSource(url(server, "Entw%C3%BCrfe%20&%20%C3%84rger"), ImapOptions(ca_file=str(server.ca_file)))
    items = list(source)
    assert len(items) == 3 and items[0][0].startswith(f"imaps://127.0.0.1:{server.port}/Entw%C3%BCrfe%20%26%20")
    assert list(source.states) == [folder]
    # a password LOGIN cannot carry goes as SASL PLAIN in UTF-8
    monkeypatch.setenv("SEQLAB_IMAP_PASSWORD", UTF8_PASSWORD)
    other = ImapSource(f"imaps://{UTF8_USER}@127.0.0.1:{server.port}/INBOX", ImapOptions(ca_file=str(server.ca_file)))
    assert list(other) == []  # zoe shares the home folder but has a mailbox of her own: empty


def test_starttls_on_imap_and_tls_refused(server: Dovecot, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEQLAB_IMAP_PASSWORD", PASSWORD)
    options = ImapOptions(ca_file=str(server.ca_file), timeout_s=10)
    # imap:// upgrades with STARTTLS (Dovecot offers it on its plain port), the certificate checked the same way
    assert len(list(ImapSource(f"imap://{USER}@127.0.0.1:{server.plain_port}/Hostile", options))) > 0
    with pytest.raises(UserError, match="could not be verified"):
        ImapSource(f"imap://{USER}@127.0.0.1:{server.plain_port}/INBOX", ImapOptions(timeout_s=10))
    # imaps:// to a port that does not speak TLS: the handshake fails, in one sentence
    with pytest.raises(UserError, match=f"TLS with 127.0.0.1:{server.plain_port} failed"):
        ImapSource(f"imaps://{USER}@127.0.0.1:{server.plain_port}/INBOX", options)
    # nothing listening
    closed = free_port()
    with pytest.raises(UserError, match=f"Cannot connect to 127.0.0.1:{closed}"):
        ImapSource(f"imaps://{USER}@127.0.0.1:{closed}/INBOX", options)
