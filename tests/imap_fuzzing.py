"""The IMAP source's fuzz target: one input -> what a hostile server says to `ImapSource`, read in memory.

Shared by the atheris script (`tests/fuzz_imap.py`, `make fuzz`) and the replay of the regression corpus
(`tests/test_fuzz_imap.py`). The input is everything the server sends, in order: the greeting, then the reply
to each command (CAPABILITY, LOGIN or AUTHENTICATE, STATUS, EXAMINE, the FETCHes of UIDs and sizes and of
bodies, LOGOUT). A line that starts with `T ` gets the tag of the last command sent, as a server echoes it, so
that a few bytes make a tagged completion. The connection is the real `ImapSource` with its real imaplib
subclass over an in-memory stream instead of a socket: nothing else is replaced.

Byte 0 is flags (bit 0: XOAUTH2 instead of LOGIN; bit 1: an `--update` state for INBOX, UIDVALIDITY 7 and
last UID 2; bit 2: two folders, INBOX and Sent); the rest is the stream.

`run_input(data)` raises `FuzzFailure` when the source

- raises anything but `UserError` (its one-sentence error for a malformed reply or a lost connection);
- says the password in an error;
- yields what it never should: a label not of the URL, a body over the reader's cap, a skip reason other
  than "too_large" and "vanished", or a UIDVALIDITY not above 0 or a negative last UID.

Memory stays bounded by the input (a literal is read only as far as the stream goes; an announced one larger
than any message is refused first): libFuzzer's -rss_limit_mb checks it.
"""

from __future__ import annotations

import imaplib
import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mail_fuzzing import kept_files, write_inputs

from seqlab.data.mail import imap, imap_replies, mime
from seqlab.data.mail.imap import FolderState, ImapSource
from seqlab.data.mail.imap_auth import ENV_PASSWORD, ENV_TOKEN, ImapOptions
from seqlab.errors import UserError

SECRET = "fuzz-Secret-7q"  # never in an error, whatever the server echoes
URL = "imap://fuzz@127.0.0.1:1143/"
REASONS = frozenset(("too_large", "vanished"))
REGRESSION_DIR = Path(__file__).resolve().parent / "fuzz_corpus" / "imap"


class FuzzFailure(AssertionError):
    """An input the IMAP source mishandles."""


class _Memory(imaplib.IMAP4):
    """imaplib's transport over the fuzz input: what is sent is dropped, what is read comes from the input."""

    stream = b""  # set per input, before the connection is made

    def open(self, host: str = "", port: int = 143, timeout: float | None = None) -> None:
        self.host, self.port = host, port
        self.sock = None
        self.file = io.BytesIO(self.stream)
        self._last_tag = b"*"

    def read(self, size: int) -> bytes:
        return self.file.read(size)

    def readline(self) -> bytes:
        line = self.file.readline(imaplib._MAXLINE + 1)
        if len(line) > imaplib._MAXLINE:
            raise self.error(f"got more than {imaplib._MAXLINE} bytes")
        return self._last_tag + line[1:] if line.startswith(b"T ") else line

    def send(self, data: bytes) -> None:
        tag = data.split(b" ", 1)[0]
        if tag.startswith(self.tagpre):  # a command, not a literal or a SASL response
            self._last_tag = tag

    def shutdown(self) -> None:
        self.file.close()


class _MemoryPlain(imap_replies.CappedLiterals, _Memory):  # the source's own literal cap, then the in-memory transport
    pass


@contextmanager
def _in_memory(stream: bytes) -> Iterator[None]:
    """The source's plain-IMAP connection class is the in-memory one while this lasts."""
    saved = imap._Plain
    _MemoryPlain.stream = stream
    imap._Plain = _MemoryPlain  # type: ignore[misc]
    try:
        yield
    finally:
        imap._Plain = saved  # type: ignore[misc]
        _MemoryPlain.stream = b""


def _check_items(source: ImapSource, items: Iterator[tuple[str, bytes | str]], folders: list[str]) -> None:
    prefixes = tuple(f"imap://127.0.0.1:1143/{f};UIDVALIDITY=" for f in folders)
    for label, raw in items:
        if not label.startswith(prefixes):
            raise FuzzFailure(f"label {label[:200]!r} is not of the URL")
        if isinstance(raw, str):
            if raw not in REASONS:
                raise FuzzFailure(f"skip reason {raw!r}")
        elif len(raw) > mime.MAX_MESSAGE_BYTES:
            raise FuzzFailure(f"a body of {len(raw)} bytes, over the reader's cap")
    for state in source.states.values():
        if type(state.uidvalidity) is not int or state.uidvalidity <= 0 or state.last_uid < 0:
            raise FuzzFailure(f"state {state!r}")


def run_input(data: bytes) -> None:
    """The fuzz target: decode the flags, then read the folders from a server that says the rest."""
    if not data:
        return
    flags, stream = data[0], data[1:]
    folders = ["INBOX", "Sent"] if flags & 4 else ["INBOX"]
    since = {"INBOX": FolderState("INBOX", 7, 2)} if flags & 2 else None
    os.environ[ENV_TOKEN if flags & 1 else ENV_PASSWORD] = SECRET
    try:
        with _in_memory(stream):
            source = ImapSource(URL + ",".join(folders), ImapOptions(insecure=True, oauth2=bool(flags & 1),
                                                                     timeout_s=5.0), since=since)
            _check_items(source, iter(source), folders)
    except UserError as exc:
        if SECRET in str(exc):
            raise FuzzFailure(f"the password in an error: {exc}") from None
    except FuzzFailure:
        raise
    except Exception as exc:
        raise FuzzFailure(f"{type(exc).__name__} escaped: {exc}"[:2000]) from exc


# ---------------------------------------------------------------- seeds

_LOGIN = b"* OK IMAP4rev1 ready\r\n* CAPABILITY IMAP4rev1 AUTH=PLAIN AUTH=XOAUTH2\r\nT OK done\r\nT OK logged in\r\n"
_STATUS = b'* STATUS INBOX (UIDVALIDITY 7)\r\nT OK status\r\n'
_EXAMINE = (b"* FLAGS (\\Seen)\r\n* 3 EXISTS\r\n* 0 RECENT\r\n* OK [UIDVALIDITY 7] ok\r\n* OK [UIDNEXT 4] ok\r\n"
            b"T OK [READ-ONLY] examined\r\n")
_SIZES = (b"* 1 FETCH (UID 1 RFC822.SIZE 40)\r\n* 2 FETCH (UID 2 RFC822.SIZE 41)\r\n"
          b"* 3 FETCH (RFC822.SIZE 99999999 UID 3)\r\nT OK fetched\r\n")
_MAIL = b"From: a@b.c\r\nSubject: hi\r\n\r\nhello there\r\n"


def _body(seq: int, uid: int, mail: bytes, uid_first: bool = True) -> bytes:
    literal = b"BODY[] {%d}\r\n" % len(mail) + mail
    return b"* %d FETCH (" % seq + (b"UID %d " % uid + literal if uid_first else literal + b" UID %d" % uid) + b")\r\n"


def seed_inputs() -> dict[str, bytes]:
    """Named server conversations: a whole good one, and ones that stop or lie at each step."""
    bodies = _body(1, 1, _MAIL) + _body(2, 2, _MAIL.replace(b"hello", b"again"), uid_first=False) + b"T OK done\r\n"
    good = _LOGIN + _STATUS + _EXAMINE + _SIZES + bodies + b"* BYE bye\r\nT OK out\r\n"
    two = (_LOGIN + _STATUS + _STATUS.replace(b"INBOX", b"Sent") + _EXAMINE + _SIZES + bodies + _EXAMINE
           + _SIZES + bodies + b"T OK out\r\n")
    seeds = {
        "good": b"\0" + good,
        "good_since": b"\2" + good,
        "good_two_folders": b"\4" + two,
        "xoauth2": b"\1" + _LOGIN.replace(b"T OK logged in", b"+ eyJzdGF0dXMiOiI0MDEifQ==\r\nT NO denied"),
        "preauth": b"\0* PREAUTH hi\r\n* CAPABILITY IMAP4rev1\r\nT OK\r\n" + _STATUS + _EXAMINE,
        "login_refused": b"\0" + _LOGIN.replace(b"T OK logged in", b"T NO [AUTHENTICATIONFAILED] " + SECRET.encode()),
        "no_folder": b"\0" + _LOGIN + b"T NO no such mailbox\r\n",
        "no_uidvalidity": b"\0" + _LOGIN + _STATUS + _EXAMINE.replace(b"UIDVALIDITY 7", b"X 7"),
        "literal_too_large": b"\0" + _LOGIN + _STATUS + _EXAMINE + _SIZES
                             + b"* 1 FETCH (UID 1 BODY[] {99999999999}\r\n",
        "literal_cut": b"\0" + _LOGIN + _STATUS + _EXAMINE + _SIZES + b"* 1 FETCH (UID 1 BODY[] {400}\r\nFrom: x",
        "uid_not_asked": b"\0" + _LOGIN + _STATUS + _EXAMINE + _SIZES + _body(1, 9, _MAIL) + b"T OK done\r\n",
        "literal_in_sizes": b"\0" + _LOGIN + _STATUS + _EXAMINE + _body(1, 1, _MAIL) + b"T OK\r\n",
        "vanished": b"\0" + _LOGIN + _STATUS + _EXAMINE + _SIZES + _body(1, 1, _MAIL) + b"T OK done\r\nT OK out\r\n",
        "bad_exists": b"\0" + _LOGIN + _STATUS + _EXAMINE.replace(b"3 EXISTS", b"x EXISTS"),
    }
    return seeds


def write_seeds(directory: Path) -> int:
    return write_inputs(directory, seed_inputs())


def regression_files() -> list[Path]:
    return kept_files(REGRESSION_DIR)
