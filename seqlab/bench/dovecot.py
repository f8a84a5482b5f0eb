"""A throwaway Dovecot IMAP server on loopback: `running_dovecot(users)` starts one in a temp folder.

Used by the IMAP benchmark (`imap_speed.py`) and by the tests (tests/imap_server.py wraps it with pytest's skip
and fail). It runs Debian's `dovecot` with its own config file (`dovecot -c CONF -F`) on two free loopback ports
(imaps, and plain imap for `--insecure`), a throwaway TLS certificate made with the openssl CLI (clients trust
it through `--ca-file`), passwd-file users and Maildir mail under the temp folder. Run as root, Dovecot drops
privileges: its login and internal processes and the mail user run as `nobody`, so the folder is made
world-traversable and the mail folder is theirs. Run as anyone else, every process is that user.

Nothing here needs pytest: a server that cannot start raises `DovecotError` with the reason.
"""

from __future__ import annotations

import contextlib
import grp
import imaplib
import os
import pwd
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Dovecot", "DovecotError", "dovecot_binary", "free_port", "missing_tools", "running_dovecot"]

DOVECOT_PATHS = ("/usr/sbin/dovecot", "/usr/local/sbin/dovecot")
READY_TIMEOUT_S = 120  # a loaded machine (a benchmark beside a training run) can take many seconds


class DovecotError(RuntimeError):
    """Dovecot is not installed, or did not start (the message says which, with its log)."""


def dovecot_binary() -> str | None:
    return shutil.which("dovecot") or next((p for p in DOVECOT_PATHS if os.access(p, os.X_OK)), None)


def missing_tools() -> str | None:
    """Why a server cannot be started here (dovecot or openssl missing), or None when it can."""
    if dovecot_binary() is None:
        return "dovecot is not installed (Debian: apt-get install dovecot-imapd)"
    if shutil.which("openssl") is None:
        return "the openssl command is not installed (it makes the server's throwaway certificate)"
    return None


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
    user: str  # the first user given: the one `client()` logs in as
    password: str
    uid: int  # the owner of the mail files
    gid: int

    def client(self) -> imaplib.IMAP4_SSL:
        """A logged-in client of the first user, to fill and inspect the server with."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        conn = imaplib.IMAP4_SSL("127.0.0.1", self.port, ssl_context=ctx, timeout=30)
        conn.login(self.user, self.password)
        return conn

    def append(self, folder: str, messages: Iterable[bytes]) -> None:
        """APPEND each message to `folder` (created when missing), in order, with CRLF line ends as IMAP wants.
        `folder` is as the server spells it (modified UTF-7); it is quoted here, imaplib does not."""
        quoted = '"' + folder.replace("\\", "\\\\").replace('"', '\\"') + '"'
        conn = self.client()
        try:
            conn.create(quoted)  # NO when it exists, which is fine
            for raw in messages:
                data = raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
                typ, resp = conn.append(quoted, None, None, data)
                if typ != "OK":
                    raise DovecotError(f"APPEND to {folder} failed: {resp!r}")
        finally:
            conn.logout()

    def deliver(self, messages: Iterable[bytes]) -> int:
        """Write messages straight into the first user's INBOX Maildir (`new/`), as a delivery agent does:
        many thousands in seconds, where APPEND takes a round trip each. Returns how many; Dovecot indexes
        them when the folder is next opened (`index_inbox`)."""
        inbox = self.root / "mail" / self.user
        for sub in ("cur", "new", "tmp"):
            (inbox / sub).mkdir(parents=True, exist_ok=True)
            os.chown(inbox / sub, self.uid, self.gid)
        os.chown(inbox, self.uid, self.gid)
        stamp, n = int(time.time()), 0
        for n, raw in enumerate(messages, 1):
            path = inbox / "new" / f"{stamp}.M{n}P{os.getpid()}.seqlab-bench"
            path.write_bytes(raw)
            os.chown(path, self.uid, self.gid)
        return n

    def index_inbox(self) -> int:
        """Open INBOX once so that Dovecot indexes what `deliver` wrote; returns the messages it holds."""
        conn = self.client()
        try:
            typ, data = conn.select("INBOX", readonly=True)
            if typ != "OK":
                raise DovecotError(f"SELECT INBOX failed: {data!r}")
            return int(data[0])
        finally:
            conn.logout()


def _owner() -> tuple[str, int, int]:
    """The user Dovecot's unprivileged processes and the mail run as: nobody under root, else ourselves."""
    entry = pwd.getpwnam("nobody") if os.getuid() == 0 else pwd.getpwuid(os.getuid())
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


def _auth_files(root: Path, users: dict[str, str], introspection: str | None, uid: int, gid: int) -> str:
    """The users' passwd file and, with `introspection`, the XOAUTH2 settings; the passdb block that reads those."""
    (root / "passwd").write_text("".join(f"{name}:{{PLAIN}}{password}:{uid}:{gid}::{root / 'home'}::\n"
                                         for name, password in users.items()), encoding="utf-8")
    oauth2 = ""
    if introspection is not None:  # XOAUTH2 tokens checked by an introspection endpoint (RFC 7662)
        (root / "oauth2.conf").write_text(f"introspection_mode = post\nintrospection_url = {introspection}\n"
                                          "username_attribute = username\nactive_attribute = active\n"
                                          "active_value = true\n")
        oauth2 = f"passdb {{\n  driver = oauth2\n  args = {root / 'oauth2.conf'}\n}}\n"
    for name in ("passwd", "oauth2.conf"):  # read by the auth processes, which run as `user`: theirs, whatever
        if (root / name).exists():           # umask this process has (prepare's is 077)
            os.chown(root / name, uid, gid)
            (root / name).chmod(0o600)
    return oauth2


def _config(root: Path, ports: tuple[int, int], cert: Path, key: Path, users: dict[str, str],
            introspection: str | None, separator: str | None) -> Path:
    user, uid, gid = _owner()
    port, plain_port = ports
    oauth2 = _auth_files(root, users, introspection, uid, gid)
    namespace = ""
    if separator is not None:  # the hierarchy separator clients see; on disk Maildir++ keeps its "."
        namespace = f"namespace inbox {{\n  inbox = yes\n  separator = {separator}\n}}\n"
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
default_internal_group = {grp.getgrgid(gid).gr_name}
default_login_user = {user}
first_valid_uid = {min(uid, 500)}
first_valid_gid = {min(gid, 500)}
mail_location = maildir:{root / 'mail'}/%u
mail_plugins =
{namespace}{'' if os.getuid() == 0 else _UNPRIVILEGED}service imap-login {{
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
def running_dovecot(users: dict[str, str], introspection: str | None = None, separator: str | None = None
                    ) -> Iterator[Dovecot]:
    """A running Dovecot with `users` (name -> password, the first for `client()`) and empty mail; stopped and
    its folder removed after. With `introspection` (an http:// URL), XOAUTH2 is offered too, each token checked
    by a POST there; with `separator`, folders are nested with it ("/" as at Gmail) instead of Dovecot's ".".
    `DovecotError` when the tools are missing or the server does not come up."""
    why = missing_tools()
    if why is not None:
        raise DovecotError(why)
    binary = dovecot_binary()
    assert binary is not None
    root = Path(tempfile.mkdtemp(prefix="seqlab-dovecot-"))
    _, uid, gid = _owner()
    proc = None
    try:
        root.chmod(0o755)  # its unprivileged processes must reach the mail, the passwd file, the sockets
        for sub in ("mail", "home"):
            (root / sub).mkdir()
            os.chown(root / sub, uid, gid)
        cert, key = _certificate(root)
        ports = (free_port(), free_port())
        conf = _config(root, ports, cert, key, users, introspection, separator)
        proc = subprocess.Popen([binary, "-c", str(conf), "-F"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        user, password = next(iter(users.items()))
        server = Dovecot(root, ports[0], ports[1], cert, user, password, uid, gid)
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


def _wait_ready(proc: subprocess.Popen, server: Dovecot) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log = server.root / "dovecot.log"
            text = log.read_text(errors="replace") if log.exists() else ""
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise DovecotError(f"dovecot exited with {proc.returncode}: {err} {text}")
        try:
            server.client().logout()
            return
        except (OSError, imaplib.IMAP4.error) as exc:
            last = exc
            time.sleep(0.1)
    log = server.root / "dovecot.log"
    tail = log.read_text(errors="replace")[-600:] if log.exists() else ""
    raise DovecotError(f"dovecot did not answer within {READY_TIMEOUT_S} s (last: {last!r}); its log ends: {tail}")
