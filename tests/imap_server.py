"""A real Dovecot IMAP server for the tests: `dovecot_server()` starts one on free loopback ports, in a temp folder.

It runs with its own config file (`dovecot -c CONF -F`), a throwaway TLS certificate made here with the openssl
CLI (the tests trust it through `--ca-file`), one passwd-file user and Maildir mail under the temp folder. Run as
root (CI), Dovecot drops privileges: its login and internal processes and the mail user run as `nobody`, so the
folder is made world-traversable and the mail folder is theirs. Run as anyone else, every process is that user.

`TcpCutter` is a tiny TCP proxy in front of it that forwards a connection's first N server bytes, then closes
it: a connection dropped mid-fetch, as a flaky network or a server restart drops one.

Without the `dovecot` binary the tests skip, or fail when SEQLAB_REQUIRE_IMAP=1 (set by .ci/run, which installs
Debian's dovecot-imapd).
"""

from __future__ import annotations

import contextlib
import imaplib
import json
import os
import pwd
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs

import pytest

USER, PASSWORD = "tester", "correct horse 7 battery"
UTF8_USER, UTF8_PASSWORD = "zoe", "Zoë's pässwörd ☃"  # LOGIN takes ASCII only: this one needs SASL PLAIN
DOVECOT_PATHS = ("/usr/sbin/dovecot", "/usr/local/sbin/dovecot")


def dovecot_binary() -> str | None:
    return shutil.which("dovecot") or next((p for p in DOVECOT_PATHS if os.access(p, os.X_OK)), None)


def require_dovecot() -> str:
    """The dovecot binary; skip without one, or fail when SEQLAB_REQUIRE_IMAP=1 (CI)."""
    found = dovecot_binary()
    if found is None:
        reason = "dovecot is not installed (Debian: apt-get install dovecot-imapd)"
        if os.environ.get("SEQLAB_REQUIRE_IMAP") == "1":
            pytest.fail(f"SEQLAB_REQUIRE_IMAP=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    if shutil.which("openssl") is None:
        pytest.fail("the openssl command is needed to make the test server's certificate", pytrace=False)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Dovecot:
    root: Path
    port: int  # imaps (TLS from the first byte)
    plain_port: int  # imap without TLS (for --insecure on loopback)
    ca_file: Path  # the throwaway certificate, to be trusted

    def client(self) -> imaplib.IMAP4_SSL:
        """A logged-in client of the test user, as the tests fill and inspect the server with it."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        conn = imaplib.IMAP4_SSL("127.0.0.1", self.port, ssl_context=ctx, timeout=30)
        conn.login(USER, PASSWORD)
        return conn

    def append(self, folder: str, messages: list[bytes]) -> None:
        """APPEND each message to `folder` (created when missing), in order, with CRLF line ends as IMAP wants.
        `folder` is as the server spells it (modified UTF-7); it is quoted here, imaplib does not."""
        quoted = '"' + folder.replace("\\", "\\\\").replace('"', '\\"') + '"'
        conn = self.client()
        try:
            conn.create(quoted)  # NO when it exists, which is fine
            for raw in messages:
                data = raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
                typ, resp = conn.append(quoted, None, None, data)
                assert typ == "OK", resp
        finally:
            conn.logout()


def _owner() -> tuple[str, int, int]:
    """The user Dovecot's unprivileged processes and the mail run as: nobody under root, else ourselves."""
    if os.getuid() == 0:
        entry = pwd.getpwnam("nobody")
    else:
        entry = pwd.getpwuid(os.getuid())
    return entry.pw_name, entry.pw_uid, entry.pw_gid


def _certificate(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


# Started by another user than root, Dovecot cannot chroot its login and anvil processes: it runs them in place.
_UNPRIVILEGED = "service anvil {\n  chroot =\n}\n"


def _config(root: Path, port: int, plain_port: int, cert: Path, key: Path, user: str, group: str,
            uid: int, gid: int, introspection: str | None) -> Path:
    (root / "passwd").write_text(f"{USER}:{{PLAIN}}{PASSWORD}:{uid}:{gid}::{root / 'home'}::\n"
                                 f"{UTF8_USER}:{{PLAIN}}{UTF8_PASSWORD}:{uid}:{gid}::{root / 'home'}::\n",
                                 encoding="utf-8")
    oauth2 = ""
    if introspection is not None:  # XOAUTH2 tokens checked by the test's introspection endpoint (RFC 7662)
        (root / "oauth2.conf").write_text(f"introspection_mode = post\nintrospection_url = {introspection}\n"
                                          "username_attribute = username\nactive_attribute = active\n"
                                          "active_value = true\n")
        oauth2 = f"passdb {{\n  driver = oauth2\n  args = {root / 'oauth2.conf'}\n}}\n"
    conf = root / "dovecot.conf"
    conf.write_text(f"""
base_dir = {root / 'run'}
state_dir = {root / 'state'}
log_path = {root / 'dovecot.log'}
protocols = imap
listen = 127.0.0.1
ssl = yes
ssl_cert = <{cert}
ssl_key = <{key}
disable_plaintext_auth = no
auth_failure_delay = 0
auth_mechanisms = plain login{' xoauth2' if introspection else ''}
default_internal_user = {user}
default_internal_group = {group}
default_login_user = {user}
first_valid_uid = {min(uid, 500)}
first_valid_gid = {min(gid, 500)}
mail_location = maildir:{root / 'mail'}/%u
mail_plugins =
{'' if os.getuid() == 0 else _UNPRIVILEGED}service imap-login {{
  {'' if os.getuid() == 0 else 'chroot ='}
  inet_listener imap {{
    address = 127.0.0.1
    port = {plain_port}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {port}
    ssl = yes
  }}
}}
service stats {{
  unix_listener stats-writer {{
    mode = 0666
  }}
}}
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {root / 'passwd'}
}}
{oauth2}userdb {{
  driver = passwd-file
  args = username_format=%u {root / 'passwd'}
}}
""")
    return conf


@contextlib.contextmanager
def dovecot_server(introspection: str | None = None) -> Iterator[Dovecot]:
    """A running Dovecot with the test user and an empty INBOX; stopped (and its folder removed) after.
    With `introspection` (an http:// URL), XOAUTH2 is offered too, each token checked by a POST there."""
    binary = require_dovecot()
    root = Path(tempfile.mkdtemp(prefix="seqlab-dovecot-"))
    user, uid, gid = _owner()
    group = _group_name(gid)
    proc = None
    try:
        root.chmod(0o755)  # its unprivileged processes must reach the mail, the passwd file, the sockets
        for sub in ("mail", "home"):
            (root / sub).mkdir()
            os.chown(root / sub, uid, gid)
        cert, key = _certificate(root)
        port, plain_port = free_port(), free_port()
        conf = _config(root, port, plain_port, cert, key, user, group, uid, gid, introspection)
        proc = subprocess.Popen([binary, "-c", str(conf), "-F"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        server = Dovecot(root, port, plain_port, cert)
        _wait_ready(proc, server)
        yield server
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def _group_name(gid: int) -> str:
    import grp

    return grp.getgrgid(gid).gr_name


def _wait_ready(proc: subprocess.Popen, server: Dovecot) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log = (server.root / "dovecot.log")
            text = log.read_text(errors="replace") if log.exists() else ""
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            pytest.fail(f"dovecot exited with {proc.returncode}: {err} {text}", pytrace=False)
        try:
            server.client().logout()
            return
        except (OSError, imaplib.IMAP4.error):
            time.sleep(0.1)
    pytest.fail("dovecot did not answer within 30 s", pytrace=False)


class Introspection:
    """An OAuth2 token introspection endpoint (RFC 7662) on loopback that Dovecot asks about each XOAUTH2
    token: `token` is active for the test user, anything else is not."""

    def __init__(self, token: str) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                asked = parse_qs(body).get("token", [""])[0]
                owner.asked.append(asked)
                answer = {"active": "true", "username": USER} if asked == owner.token else {"active": "false"}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.token, self.asked = token, []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/introspect"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class TcpCutter:
    """A loopback TCP proxy to `port` that closes each connection after forwarding `cut_after` server bytes.

    `cut_after=None` forwards everything (so a test can switch the cut off and rerun through the same port).
    """

    def __init__(self, port: int, cut_after: int | None) -> None:
        self.target, self.cut_after = port, cut_after
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.cuts = 0
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            limit = self.cut_after
            threading.Thread(target=self._pipe, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, limit), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, limit: int | None) -> None:
        sent = 0
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if limit is not None and sent + len(data) >= limit:
                    dst.sendall(data[: limit - sent])
                    self.cuts += 1
                    break
                dst.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def close(self) -> None:
        self._stop = True
        self.sock.close()


__all__ = ["PASSWORD", "USER", "UTF8_PASSWORD", "UTF8_USER", "Dovecot", "Introspection", "TcpCutter", "dovecot_server"]
