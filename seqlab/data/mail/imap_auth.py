"""How the IMAP source logs in: `ImapOptions` (the flags of `seqlab prepare`) and the secret they point to.

The secret (a password, or with `oauth2` an OAuth2 access token for XOAUTH2, as Gmail and Outlook take) comes
from, in this order:

    the environment   SEQLAB_IMAP_PASSWORD (or SEQLAB_IMAP_TOKEN with oauth2)
    a command         `password_command`, e.g. "pass show mail" (as mbsync's PassCmd): split like a shell
                      line but run without one (no expansion, no injection), its stdout's first line
    a prompt          getpass, only when stdin is a terminal

never from argv (a URL with a password is refused in `imap_url.py`), never written anywhere, never in an
error: `redact` takes it out of any server text quoted in one.
"""

from __future__ import annotations

import getpass
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from seqlab.errors import UserError

__all__ = ["ENV_PASSWORD", "ENV_TOKEN", "ImapOptions", "read_secret", "redact", "xoauth2"]

ENV_PASSWORD = "SEQLAB_IMAP_PASSWORD"
ENV_TOKEN = "SEQLAB_IMAP_TOKEN"
COMMAND_TIMEOUT_S = 120  # a password manager may wait for the person to unlock it


@dataclass(frozen=True)
class ImapOptions:
    """How to reach the server (never what a DATA_DIR holds: the URL, saved as the source, says which mail)."""

    ca_file: str | None = None  # PEM certificates to trust instead of the system's (a private CA); else SSL_CERT_FILE
    insecure: bool = False  # imap:// without TLS, loopback hosts only
    password_command: str | None = None
    oauth2: bool = False  # XOAUTH2 with an access token instead of LOGIN with a password
    timeout_s: float = 120.0  # a silent server is given up on after this long

    def __post_init__(self) -> None:
        if self.ca_file is not None and not Path(self.ca_file).expanduser().is_file():
            raise UserError(f"--ca-file {self.ca_file} is not a file.")
        if self.password_command is not None and not self.password_command.strip():
            raise UserError("--password-command is empty; give the command that prints the password.")


def read_secret(options: ImapOptions, user: str, host: str) -> str:
    """The password (or token) from the environment, the command, or a prompt; `UserError` when none can be had."""
    what = "OAuth2 access token" if options.oauth2 else "password"
    env = ENV_TOKEN if options.oauth2 else ENV_PASSWORD
    value = os.environ.get(env)
    if value:
        return value
    if options.password_command is not None:
        return _from_command(options.password_command, what)
    if sys.stdin is not None and sys.stdin.isatty():
        try:
            value = getpass.getpass(f"IMAP {what} for {user} at {host}: ")
        except (EOFError, KeyboardInterrupt):
            value = ""
        if value:
            return value
        raise UserError(f"No IMAP {what} was typed.")
    raise UserError(f"No IMAP {what}: set {env}, pass --password-command, or run in a terminal to be asked.")


def _from_command(command: str, what: str) -> str:
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise UserError(f"--password-command cannot be split into words ({exc}).") from None
    if not argv:
        raise UserError("--password-command is empty; give the command that prints the password.")
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=None,
                              timeout=COMMAND_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise UserError(f"--password-command: {argv[0]!r} was not found.") from None
    except OSError as exc:
        raise UserError(f"--password-command could not be run ({exc.strerror}).") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"--password-command printed nothing within {COMMAND_TIMEOUT_S} s and was stopped.") from None
    if done.returncode != 0:
        raise UserError(f"--password-command exited with status {done.returncode}.")
    first = done.stdout.split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8", "replace")
    if not first:
        raise UserError(f"--password-command printed an empty first line, not the {what}.")
    return first


def xoauth2(user: str, token: str) -> bytes:
    """The SASL XOAUTH2 initial response (Google's and Microsoft's format)."""
    return f"user={user}\x01auth=Bearer {token}\x01\x01".encode()


def redact(text: str | bytes, secret: str | None, limit: int = 160) -> str:
    """Server text fit for an error message: decoded, printable, the secret (and its XOAUTH2 form) cut out, short."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if secret:
        text = text.replace(secret, "***")
    text = "".join(c if c.isprintable() else " " for c in text)
    text = " ".join(text.split())
    return text[:limit].rstrip(". ")
