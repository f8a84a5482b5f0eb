"""The IMAP source's address: `imaps://USER@HOST[:PORT]/FOLDER[,FOLDER...]`, parsed and checked.

    imaps://   TLS from the first byte (port 993): the default, what Gmail, Fastmail and Outlook offer
    imap://    STARTTLS on port 143, refused when the server does not offer it; with --insecure (loopback
               hosts only) no TLS at all, for a test server or an SSH tunnel's local end

USER is percent-encoded as URLs want it: a login that is itself an address, `you@gmail.com`, is written
`you%40gmail.com` (an unencoded `@` before the last one is read the same way, as people type it). The path
names the folders to read, comma-separated, each percent-decoded (`Archive%2C2024` for a comma, `%20` for a
space); none means INBOX. A password in the URL is refused: argv is visible to every process on the machine
and lands in shell history. Folder names go to the server as IMAP's modified UTF-7 (RFC 3501 5.1.3), quoted.
"""

from __future__ import annotations

import base64
import ipaddress
from dataclasses import dataclass
from urllib.parse import quote, unquote

from seqlab.errors import UserError

__all__ = ["ImapUrl", "is_imap_url", "parse_imap_url", "quote_mailbox", "encode_mailbox"]

SCHEMES = {"imaps": 993, "imap": 143}


def is_imap_url(source: str) -> bool:
    return source.strip().lower().startswith(("imap://", "imaps://"))


@dataclass(frozen=True)
class ImapUrl:
    scheme: str  # "imaps" or "imap"
    user: str
    host: str
    port: int
    folders: tuple[str, ...]

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def label(self, folder: str, uidvalidity: int, uid: int) -> str:
        """Where one message came from, in RFC 5092's form (no user: the label is stored in emails.jsonl)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/{quote(folder, safe='/')};UIDVALIDITY={uidvalidity}/;UID={uid}"


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_imap_url(source: str) -> ImapUrl:
    """`UserError` with one sentence for anything but `imap[s]://USER@HOST[:PORT][/FOLDER,...]`."""
    text = source.strip()
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in SCHEMES:
        raise UserError("An IMAP source is written imaps://USER@HOST[:PORT]/FOLDER.")
    authority, _, path = rest.partition("/")
    if any(c in authority for c in "?#") or "?" in path or "#" in path:
        raise UserError("An IMAP source takes no query or fragment; write imaps://USER@HOST[:PORT]/FOLDER.")
    userinfo, at, hostport = authority.rpartition("@")
    if not at or not userinfo:
        raise UserError("The IMAP source names no user; write imaps://USER@HOST/FOLDER "
                        "(a login that is an address is written you%40example.com).")
    if ":" in userinfo:
        raise UserError("A password in the IMAP source's URL is refused (every process can read a command line); "
                        "remove it and set SEQLAB_IMAP_PASSWORD, use --password-command, or type it at the prompt.")
    user = unquote(userinfo)
    host, port = _host_port(hostport, SCHEMES[scheme])
    folders = tuple(unquote(f) for f in path.split(",")) if path.strip("/") else ("INBOX",)
    if any(not f or any(ord(c) < 32 or ord(c) == 127 for c in f) for f in folders):
        raise UserError("An IMAP folder name in the URL is empty or holds control characters.")
    return ImapUrl(scheme, user, host, port, folders)


def _host_port(hostport: str, default: int) -> tuple[str, int]:
    if hostport.startswith("["):  # an IPv6 literal
        host, _, tail = hostport[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
        if tail and not tail.startswith(":"):
            host = ""
    else:
        host, _, port_text = hostport.partition(":")
    if not host or any(c.isspace() for c in host):
        raise UserError("The IMAP source names no host; write imaps://USER@HOST[:PORT]/FOLDER.")
    if not port_text:
        return host, default
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UserError(f"The IMAP port must be a number from 1 to 65535, not {port_text[:20]!r}.")
    return host, int(port_text)


def encode_mailbox(name: str) -> str:
    """A folder name in IMAP's modified UTF-7: printable ASCII as is ('&' as '&-'), the rest as &base64-."""
    out: list[str] = []
    pending: list[str] = []

    def flush() -> None:
        if pending:
            data = "".join(pending).encode("utf-16-be")
            out.append("&" + base64.b64encode(data).decode().rstrip("=").replace("/", ",") + "-")
            pending.clear()

    for ch in name:
        if 0x20 <= ord(ch) <= 0x7E:
            flush()
            out.append("&-" if ch == "&" else ch)
        else:
            pending.append(ch)
    flush()
    return "".join(out)


def quote_mailbox(name: str) -> str:
    """The folder as an IMAP quoted string, ready for a command line."""
    encoded = encode_mailbox(name)
    return '"' + encoded.replace("\\", "\\\\").replace('"', '\\"') + '"'
