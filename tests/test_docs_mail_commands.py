"""The commands docs/data.md shows a person for Gmail, Fastmail and Thunderbird, run as typed, with placeholders.

tests/test_docs.py parses every command of the docs; these three are also run, word for word from the doc but
for what only the person has: the server (`you%40gmail.com@imap.gmail.com` becomes the test user at a local
Dovecot whose folders nest with "/" as Gmail's do, `[Gmail]/Sent Mail` included), the certificate it trusts
(SSL_CERT_FILE, as the doc says a private CA is given), the password (SEQLAB_IMAP_PASSWORD for Gmail; for
Fastmail the doc's `--password-command 'pass show fastmail/app-password'` runs a `pass` on PATH that prints
it) and the Thunderbird profile (HOME holding one). Each must prepare what an mbox of the same mail prepares to.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest
from docs_commands import commands
from imap_server import PASSWORD, USER, require_dovecot
from mail_samples import corpus_messages, write_mbox
from test_imap import as_stored, without_source
from test_thunderbird import _bytes_of, make_profile

from seqlab.bench.dovecot import Dovecot, running_dovecot
from seqlab.cli.main import main as cli_main

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "data.md"
MSGS = corpus_messages()
FOLDERS = {"INBOX": MSGS[:20], "[Gmail]/Sent Mail": MSGS[20:32], "Sent": MSGS[32:]}


def doc_command(marker: str) -> list[str]:
    """The words of the one fenced command of docs/data.md that contains `marker` (its comment left out)."""
    found = [c for c in commands(DOC.read_text()) if c.whole and marker in c.text]
    assert len(found) == 1, f"docs/data.md should show one command with {marker!r}, not {len(found)}"
    words = shlex.split(found[0].text, comments=True)
    assert words[0] == ".venv/bin/seqlab", words
    return [sys.executable, "-m", "seqlab", *words[1:]]


def run(words: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    env = {**env, "PYTHONPATH": str(ROOT)}
    return subprocess.run(words, cwd=cwd, env=env, capture_output=True, text=True, timeout=180,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def server() -> Iterator[Dovecot]:
    require_dovecot()
    with running_dovecot({USER: PASSWORD}, separator="/") as d:
        for folder, msgs in FOLDERS.items():
            d.append(folder, [as_stored(m) for m in msgs])
        yield d


def at_server(words: list[str], server: Dovecot) -> list[str]:
    """The doc's imaps:// URL with the person's login and host swapped for the test user at the local server."""
    return [re.sub(r"^imaps://[^/]+/", f"imaps://{USER}@127.0.0.1:{server.port}/", w) for w in words]


def folders_read(data_dir: Path) -> Counter:
    rows = [json.loads(line) for line in (data_dir / "emails.jsonl").read_text().splitlines()]
    return Counter(unquote(re.search(r"^imaps://[^/]+/(.+?);UIDVALIDITY=", r["source"]).group(1)) for r in rows)


def same_as_mbox(data_dir: Path, msgs: list[bytes], tmp_path: Path) -> None:
    """`data_dir` holds what an mbox of `msgs` (the folders' mail in the order named) prepares to."""
    mbox = write_mbox(tmp_path / "same.mbox", msgs)
    assert cli_main(["prepare", str(mbox), "--out", str(tmp_path / "same"), "--quiet"]) == 0
    assert without_source(data_dir) == without_source(tmp_path / "same")


def base_env(tmp_path: Path, server: Dovecot) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAB_IMAP_")}
    return {**env, "SSL_CERT_FILE": str(server.ca_file), "HOME": str(tmp_path / "home")}


def test_the_gmail_command(server: Dovecot, tmp_path: Path) -> None:
    words = at_server(doc_command("imap.gmail.com"), server)
    r = run(words, tmp_path, {**base_env(tmp_path, server), "SEQLAB_IMAP_PASSWORD": PASSWORD})
    assert r.returncode == 0, r.stderr
    read = folders_read(tmp_path / "out" / "data-gmail")
    assert set(read) == {"INBOX", "[Gmail]/Sent Mail"}
    same_as_mbox(tmp_path / "out" / "data-gmail", FOLDERS["INBOX"] + FOLDERS["[Gmail]/Sent Mail"], tmp_path)
    assert PASSWORD not in r.stdout + r.stderr


def test_the_fastmail_command_with_its_password_command(server: Dovecot, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_pass = bin_dir / "pass"  # `pass show fastmail/app-password` prints the password, as pass does
    fake_pass.write_text(f"#!/bin/sh\n[ \"$1 $2\" = 'show fastmail/app-password' ] || exit 1\n"
                         f"printf '%s\\n' '{PASSWORD}'\n")
    fake_pass.chmod(0o755)
    env = base_env(tmp_path, server)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    words = at_server(doc_command("imap.fastmail.com"), server)
    r = run(words, tmp_path, env)
    assert r.returncode == 0, r.stderr
    read = folders_read(tmp_path / "out" / "data-fm")
    assert set(read) == {"INBOX", "Sent"}
    same_as_mbox(tmp_path / "out" / "data-fm", FOLDERS["INBOX"] + FOLDERS["Sent"], tmp_path)
    assert PASSWORD not in r.stdout + r.stderr


def test_the_thunderbird_command(tmp_path: Path) -> None:
    root = tmp_path / "home" / ".thunderbird"
    blocks = make_profile(root / "Profiles" / "ab12.default-release", MSGS)
    (root / "profiles.ini").write_text("[Profile0]\nName=default-release\nIsRelative=1\n"
                                       "Path=Profiles/ab12.default-release\nDefault=1\n")
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    r = run(doc_command("prepare thunderbird --out out/data-tb"), tmp_path, env)
    assert r.returncode == 0, r.stderr
    assert "Thunderbird profile default-release" in r.stdout
    one = tmp_path / "all.mbox"
    one.write_bytes(b"".join(blocks))
    assert cli_main(["prepare", str(one), "--out", str(tmp_path / "mbox"), "--quiet"]) == 0
    assert _bytes_of(tmp_path / "out" / "data-tb") == _bytes_of(tmp_path / "mbox")
