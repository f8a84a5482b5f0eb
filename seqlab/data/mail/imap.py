"""Mail read from an IMAP server: `ImapSource(url, options)` yields `(label, raw bytes)` like every other source.

`seqlab prepare imaps://USER@HOST[:PORT]/FOLDER[,FOLDER...]` resolves to one (`sources.resolve_source`); the
same reader, cleaning, dedupe and thread split follow. The URL and its checks are in `imap_url.py`, the login
and its secret in `imap_auth.py`, the server's replies read and capped in `imap_replies.py`.

Read-only, always: each folder is opened with EXAMINE and bodies are fetched with BODY.PEEK[], so no flag
(\\Seen included) ever changes on the server. Per folder, one pass of `FETCH lo:hi (UID RFC822.SIZE)` over
sequence windows learns every message's UID and size (a server may not renumber during a FETCH, so the list
is consistent), then `UID FETCH` takes the bodies in batches of at most `BATCH_UIDS` messages and about
`BATCH_BYTES`. A message the sizes say is over the reader's cap (`mime.MAX_MESSAGE_BYTES`) is yielded as the
skip "too_large" without being downloaded; one the server reports gone meanwhile as "vanished". A literal the
server announces larger than any message we asked for is refused before a byte is read (imaplib would
allocate it whole). Line ends come back CRLF, as IMAP sends them, and are given to the reader as LF, as
mail stored on disk has them, so a folder prepares as its mbox export does.

Labels are RFC 5092 URLs without the user: `imaps://HOST:PORT/FOLDER;UIDVALIDITY=V/;UID=U`.

For `--update` (a DATA_DIR that grows), the source reports what it read and can skip what was read before:

    ImapSource(url, options, since={folder: FolderState, ...})   # read only UIDs above since's last_uid
    source.states -> {folder: FolderState(folder, uidvalidity, last_uid, reset)}

and as `ledger.TrackedSource`, what `prepare` records in sources.json and `--update` hands back:

    source.items(since: dict | None) -> the items     since: an earlier state(), or None for everything
    source.state() -> {"folders": {folder: {"uidvalidity": V, "last_uid": U}}}

`since[folder]` is honoured when its `uidvalidity` equals the server's; otherwise the whole folder is read
again and its state says `reset=True` (the server renumbered it: the old UIDs mean nothing now). `states` is
kept current while items are yielded: after the iterator stops (or a `--limit` stops reading), `last_uid`
is the highest UID yielded (a skip included), or `since`'s when nothing newer was there.

Faults are one-sentence `UserError`s with no server text unredacted and never the secret: a refused
connection, a certificate that does not verify, a wrong password, a missing folder, a connection dropped
mid-fetch, a malformed response.
"""

from __future__ import annotations

import imaplib
import re
import ssl
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from seqlab.data.mail import mime
from seqlab.data.mail.imap_auth import ImapOptions, read_secret, redact, xoauth2
from seqlab.data.mail.imap_replies import (
    MAX_UID,
    CappedLiterals,
    Malformed,
    SaslOnce,
    batches,
    bodies,
    fetch_cap,
    quoted,
    reply_text,
    uid_sizes,
)
from seqlab.data.mail.imap_url import ImapUrl, parse_imap_url, quote_mailbox
from seqlab.data.mail.message_files import FoundItems
from seqlab.errors import UserError

__all__ = ["FolderState", "ImapSource"]

SIZE_WINDOW = 1000  # messages per FETCH of UIDs and sizes


@dataclass(frozen=True)
class FolderState:
    """What was read of one folder: its UIDVALIDITY and the highest UID read (0: none yet)."""

    folder: str
    uidvalidity: int
    last_uid: int
    reset: bool = False  # `since` named another UIDVALIDITY: the folder was read from its first message


class _Plain(CappedLiterals, imaplib.IMAP4):
    pass


class _Tls(CappedLiterals, imaplib.IMAP4_SSL):
    pass


class ImapSource(FoundItems):
    """The messages of `url`'s folders, in folder order then UID order, as `(label, raw bytes | skip reason)`."""

    def __init__(self, url: str | ImapUrl, options: ImapOptions | None = None, *,
                 since: Mapping[str, FolderState] | None = None, progress: bool = False) -> None:
        super().__init__(())  # items come from __iter__, read from the server
        self.url = parse_imap_url(url) if isinstance(url, str) else url
        self.options = options or ImapOptions()
        self.since = dict(since or {})
        self.progress = progress
        self.states: dict[str, FolderState] = {}
        check_transport(self.url, self.options)
        # Asked for now, before any progress bar is drawn over a prompt; kept in memory only.
        self._secret = read_secret(self.options, self.url.user, self.url.host)
        # Connected and logged in now too, so that a refused login or certificate is said before reading starts.
        self._conn: imaplib.IMAP4 | None = self._connect()
        try:
            for folder in self.url.folders:
                self._check_folder(self._conn, folder)
        except BaseException:
            self.close()
            raise

    def _say(self, what: object) -> str:
        """Server text (an imaplib exception or a reply) fit for an error message: short, the secret cut out."""
        return redact(reply_text(what), self._secret)

    @property
    def where(self) -> str:
        return f"{self.url.host}:{self.url.port}"

    def __iter__(self) -> Iterator[tuple[str, bytes | str]]:
        conn, self._conn = self._conn or self._connect(), None
        try:
            for folder in self.url.folders:
                yield from self._folder(conn, folder)
        except UserError:
            _drop(conn)  # a lost or lying server gets no polite LOGOUT to wait for
            raise
        finally:
            _logout(conn)

    def items(self, since: Mapping[str, Any] | None) -> Iterator[tuple[str, bytes | str]]:
        """`ledger.TrackedSource`: the items, leaving out the UIDs an earlier `state()` says were read."""
        self.since = _folder_states(since)
        return iter(self)

    def state(self) -> dict[str, Any]:
        """`ledger.TrackedSource`: per folder its UIDVALIDITY and the highest UID read, JSON-able."""
        folders = {name: {"uidvalidity": s.uidvalidity, "last_uid": s.last_uid} for name, s in self.states.items()}
        return {"folders": folders}

    def newest(self) -> dict[str, Any]:
        """A `state()` as if every message now in the folders had been read (per folder its UIDVALIDITY and
        UIDNEXT - 1, asked with STATUS, nothing downloaded): `items` of it yields only mail that arrives later."""
        conn = self._conn or self._connect()
        self._conn = conn  # kept for the next `items`, which logs out
        folders = {}
        for folder in self.url.folders:
            try:
                typ, data = conn.status(quote_mailbox(folder), "(UIDVALIDITY UIDNEXT)")
                text = reply_text(data)
                text = text[text.rfind("("):]  # the attributes, after the folder's name (which may hold anything)
                v, n = re.search(r"UIDVALIDITY (\d+)", text), re.search(r"UIDNEXT (\d+)", text)
                if typ != "OK" or v is None or n is None:
                    raise Malformed(text)
            except (imaplib.IMAP4.abort, OSError) as exc:
                self._conn = None
                _drop(conn)
                raise self._lost(folder, exc, 0) from None
            except (imaplib.IMAP4.error, Malformed, ValueError) as exc:  # ValueError: replies decoded as ASCII
                raise UserError(f"{self.where} sent a malformed reply about {folder!r} ({self._say(exc)}).") from None
            folders[folder] = {"uidvalidity": int(v.group(1)), "last_uid": max(0, int(n.group(1)) - 1)}
        return {"folders": folders}

    def close(self) -> None:
        """Log out, when the items were never read (reading them logs out at the end)."""
        if self._conn is not None:
            _logout(self._conn)
            self._conn = None

    # ------------------------------------------------------------ connecting and logging in

    def _context(self) -> ssl.SSLContext:
        # The system's store (and SSL_CERT_FILE / SSL_CERT_DIR, which OpenSSL reads), or only --ca-file.
        ca = self.options.ca_file
        return ssl.create_default_context(cafile=str(Path(ca).expanduser()) if ca else None)

    def _connect(self) -> imaplib.IMAP4:
        u, o = self.url, self.options
        try:
            if u.scheme == "imaps":
                conn: imaplib.IMAP4 = _Tls(u.host, u.port, ssl_context=self._context(), timeout=o.timeout_s)
            else:
                conn = _Plain(u.host, u.port, timeout=o.timeout_s)
                if not o.insecure:
                    if "STARTTLS" not in conn.capabilities:
                        conn.shutdown()
                        raise UserError(f"{self.where} does not offer STARTTLS; use imaps:// (port 993), or "
                                        "--insecure for a server on this machine.")
                    conn.starttls(ssl_context=self._context())
        except ssl.SSLCertVerificationError as exc:
            raise UserError(f"The TLS certificate of {self.where} could not be verified ({exc.verify_message}); "
                            "trust a private CA with --ca-file or SSL_CERT_FILE.") from None
        except ssl.SSLError as exc:
            raise UserError(f"TLS with {self.where} failed ({exc.reason or 'handshake refused'}).") from None
        except TimeoutError:
            raise UserError(f"{self.where} did not answer within {o.timeout_s:g} s.") from None
        except OSError as exc:
            raise UserError(f"Cannot connect to {self.where} ({exc.strerror or type(exc).__name__}).") from None
        except (imaplib.IMAP4.error, Malformed, ValueError) as exc:  # ValueError: imaplib decodes replies as ASCII
            raise UserError(f"{self.where} did not greet as an IMAP server ({self._say(exc)}).") from None
        conn.debug = 0  # imaplib's debug output would print the LOGIN line, password included
        self._login(conn)
        return conn

    def _login(self, conn: imaplib.IMAP4) -> None:
        u, o = self.url, self.options
        secret = self._secret
        try:
            if o.oauth2:
                conn.authenticate("XOAUTH2", SaslOnce(xoauth2(u.user, secret)))
            elif secret.isascii() and u.user.isascii():
                conn.login(quoted(u.user), secret)  # imaplib quotes the password itself
            else:  # LOGIN takes ASCII; SASL PLAIN carries UTF-8
                conn.authenticate("PLAIN", SaslOnce(f"\0{u.user}\0{secret}".encode()))
        except imaplib.IMAP4.abort as exc:
            raise UserError(f"The connection to {self.where} was lost while logging in "
                            f"({redact(reply_text(exc), secret)}).") from None
        except imaplib.IMAP4.error as exc:
            how = "token" if o.oauth2 else "password"
            raise UserError(f"{self.where} refused the login of {u.user} (wrong user or {how}?): "
                            f"{redact(reply_text(exc), secret)}.") from None
        except (OSError, Malformed, ValueError) as exc:
            raise UserError(f"The connection to {self.where} failed while logging in "
                            f"({redact(reply_text(exc), secret)}).") from None

    # ------------------------------------------------------------ one folder

    def _folder(self, conn: imaplib.IMAP4, folder: str) -> Iterator[tuple[str, bytes | str]]:
        try:
            uidvalidity, uids, sizes = self._examine(conn, folder)
        except (imaplib.IMAP4.abort, OSError) as exc:
            raise self._lost(folder, exc, 0) from None
        except (imaplib.IMAP4.error, Malformed, ValueError) as exc:
            raise UserError(f"{self.where} sent a malformed reply about {folder!r} ({self._say(exc)}).") from None
        done = 0
        bar = tqdm(total=sum(sizes), unit="B", unit_scale=True, desc=f"IMAP {folder}", leave=False,
                   disable=not self.progress)
        try:
            for batch in batches(uids, sizes):
                try:
                    got = self._fetch(conn, [uids[i] for i in batch if sizes[i] <= fetch_cap()])
                except (imaplib.IMAP4.abort, OSError) as exc:
                    raise self._lost(folder, exc, done) from None
                except (imaplib.IMAP4.error, Malformed, ValueError) as exc:
                    raise UserError(f"{self.where} sent a malformed reply while reading {folder!r} "
                                    f"({self._say(exc)}); nothing was written.") from None
                for i in batch:
                    uid = uids[i]
                    raw = got.get(uid, "vanished") if sizes[i] <= fetch_cap() else "too_large"
                    if isinstance(raw, bytes):
                        raw = raw.replace(b"\r\n", b"\n")
                        if len(raw) > mime.MAX_MESSAGE_BYTES:
                            raw = "too_large"
                    self.states[folder] = FolderState(folder, uidvalidity, uid, self.states[folder].reset)
                    done += 1
                    bar.update(sizes[i])
                    yield self.url.label(folder, uidvalidity, uid), raw
        finally:
            bar.close()

    def _check_folder(self, conn: imaplib.IMAP4, folder: str) -> None:
        try:
            typ, data = conn.status(quote_mailbox(folder), "(UIDVALIDITY)")
        except (imaplib.IMAP4.abort, OSError) as exc:
            raise self._lost(folder, exc, 0) from None
        except (imaplib.IMAP4.error, Malformed, ValueError) as exc:
            typ, data = "NO", [self._say(exc)]
        if typ != "OK":
            raise UserError(f"The folder {folder!r} cannot be opened on {self.where} (does it exist?): "
                            f"{self._say(data)}.")

    def _examine(self, conn: imaplib.IMAP4, folder: str) -> tuple[int, array, array]:
        """EXAMINE the folder; its UIDVALIDITY and the UIDs (above `since`'s) and sizes of its messages."""
        typ, data = conn.select(quote_mailbox(folder), readonly=True)  # readonly: EXAMINE, never SELECT
        if typ != "OK":
            raise UserError(f"The folder {folder!r} cannot be opened on {self.where} (does it exist?): "
                            f"{self._say(data)}.")
        if not data or not isinstance(data[0], bytes) or not data[0]:  # a literal comes as a tuple
            raise Malformed("no EXISTS count")
        exists = int(data[0])
        _, found = conn.response("UIDVALIDITY")
        if not found or not isinstance(found[-1], bytes) or not found[-1].isdigit() \
                or not 0 < int(found[-1]) <= MAX_UID:  # 32 bits, not 0 (RFC 3501), and never negative
            raise Malformed("no UIDVALIDITY")
        uidvalidity = int(found[-1])
        before = self.since.get(folder)
        start = before.last_uid if before is not None and before.uidvalidity == uidvalidity else 0
        self.states[folder] = FolderState(folder, uidvalidity, start, before is not None and start == 0
                                          and before.uidvalidity != uidvalidity)
        pairs: dict[int, int] = {}
        for lo in range(1, exists + 1, SIZE_WINDOW):
            hi = min(exists, lo + SIZE_WINDOW - 1)
            typ, data = conn.fetch(f"{lo}:{hi}", "(UID RFC822.SIZE)")
            if typ != "OK":
                raise Malformed(reply_text(data))
            pairs.update(uid_sizes(data, start))
        ordered = sorted(pairs)
        return uidvalidity, array("Q", ordered), array("Q", (pairs[u] for u in ordered))

    def _fetch(self, conn: imaplib.IMAP4, uids: list[int]) -> dict[int, bytes]:
        """The bodies of `uids` by UID, read with BODY.PEEK[] (no \\Seen)."""
        if not uids:
            return {}
        typ, data = conn.uid("FETCH", ",".join(map(str, uids)), "(UID BODY.PEEK[])")
        if typ != "OK":
            raise Malformed(reply_text(data))
        return bodies(data, uids)

    def _lost(self, folder: str, exc: BaseException, done: int) -> UserError:
        return UserError(f"The connection to {self.where} was lost while reading {folder!r} after {done} messages "
                         f"({self._say(exc) or type(exc).__name__}); nothing was written, run it again.")


def _folder_states(since: Mapping[str, Any] | None) -> dict[str, FolderState]:
    """`state()`'s dict as FolderStates; anything unreadable in it is left out (that folder is read whole)."""
    folders = since.get("folders") if isinstance(since, Mapping) else None
    out: dict[str, FolderState] = {}
    for name, entry in (folders.items() if isinstance(folders, Mapping) else ()):
        v, u = (entry.get("uidvalidity"), entry.get("last_uid")) if isinstance(entry, Mapping) else (None, None)
        if isinstance(name, str) and type(v) is int and type(u) is int and v > 0 and u >= 0:
            out[name] = FolderState(name, v, u)
    return out


def check_transport(url: ImapUrl, options: ImapOptions) -> None:
    """Plain IMAP only when asked for with --insecure, and then only to this machine."""
    if options.insecure and url.scheme == "imaps":
        raise UserError("--insecure is for imap:// (no TLS) on this machine; imaps:// always uses TLS.")
    if options.insecure and not url.loopback:
        raise UserError(f"--insecure is refused for {url.host}: mail and password would cross the network "
                        "unencrypted; it is only for a server on this machine (localhost, 127.0.0.1, ::1).")


def _logout(conn: imaplib.IMAP4) -> None:
    if getattr(conn, "_dropped", False):
        return
    try:
        conn.logout()
    except (OSError, imaplib.IMAP4.error, Malformed, ValueError):
        pass


def _drop(conn: imaplib.IMAP4) -> None:
    conn._dropped = True  # type: ignore[attr-defined]
    try:
        conn.shutdown()
    except OSError:
        pass
