"""The mail folders a Thunderbird profile's prefs.js places outside `Mail/` and `ImapMail/`.

Thunderbird lets a person move an account's local folder anywhere (Account Settings > Server Settings > Local
Directory). It records the place in the profile's `prefs.js`, one preference a line:

    user_pref("mail.server.server2.directory-rel", "[ProfD]../../Archive/imap.example.org");
    user_pref("mail.server.server2.directory", "/home/ann/Archive/imap.example.org");

`directory-rel` is the place relative to a known folder, `[ProfD]` the profile (the form Thunderbird writes and
reads first, so a profile moved with its mail still works); `directory` is the absolute path, used when there is
no relative form or it names a folder this module cannot resolve. prefs.js is JavaScript syntax but only ever
read here as data: each `user_pref("key", value);` line is matched by a pattern and its string value decoded
by JavaScript's escape rules (never evaluated); a line that does not match is passed over.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

__all__ = ["PREFS_JS", "AccountDir", "account_dirs", "folder_prefix", "outside_accounts", "parse_prefs"]

PREFS_JS = "prefs.js"
MAX_PREFS_BYTES = 16 << 20  # a real prefs.js is tens of KB; a bigger file is not one
_PREF = re.compile(r'^\s*user_pref\(\s*"((?:[^"\\]|\\.)*)"\s*,\s*("(?:[^"\\]|\\.)*"|-?\d+|true|false)\s*\)\s*;')
_ESCAPE = re.compile(r'\\(u[0-9A-Fa-f]{4}|x[0-9A-Fa-f]{2}|.)', re.S)
_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "0": "\0"}
_SERVER_DIR = re.compile(r"^mail\.server\.(server\d+)\.directory(-rel)?$")
PROFILE_TOKEN = "[ProfD]"


def _unescape(body: str) -> str:
    """A JavaScript string literal's body decoded: \\n, \\t, \\xHH, \\uHHHH, and \\c for any other c."""
    def one(m: re.Match[str]) -> str:
        code = m.group(1)
        if len(code) > 1:
            return chr(int(code[1:], 16))
        return _SIMPLE.get(code, code)

    text = _ESCAPE.sub(one, body)
    # a character beyond the BMP escaped as two \\u surrogates (as JSON writes it) joined again; a lone one is U+FFFD
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace") if "\\u" in body else text


def parse_prefs(text: str) -> dict[str, str | int | bool]:
    """Every `user_pref("key", value);` line of a prefs.js: strings decoded, integers and booleans as such."""
    prefs: dict[str, str | int | bool] = {}
    for line in text.split("\n"):  # not splitlines: U+2028 and the like may sit inside a string
        m = _PREF.match(line)
        if m is None:
            continue
        key, raw = _unescape(m.group(1)), m.group(2)
        if raw.startswith('"'):
            prefs[key] = _unescape(raw[1:-1])
        elif raw in ("true", "false"):
            prefs[key] = raw == "true"
        else:
            prefs[key] = int(raw)
    return prefs


@dataclass(frozen=True)
class AccountDir:
    """An account's mail folder as prefs.js places it: `server` is the account's key ("server2")."""

    server: str
    path: Path

    @property
    def exists(self) -> bool:
        return self.path.is_dir()


def _relative(value: str, profile: Path) -> Path | None:
    """A `directory-rel` value resolved against the profile; None for another base than [ProfD]."""
    if not value.startswith(PROFILE_TOKEN):
        return None
    rest = value[len(PROFILE_TOKEN):].replace("\\", "/")
    return Path(os.path.normpath(Path(profile, *[part for part in rest.split("/") if part])))


def _absolute(value: str) -> Path | None:
    if value.startswith("/"):
        return Path(value)
    if PureWindowsPath(value).is_absolute():  # a Windows profile read where it was written
        return Path(value)
    return None


def account_dirs(profile: Path) -> list[AccountDir]:
    """The folder of each account prefs.js names (relative form first), in server order; none without a
    readable prefs.js. Folders are not checked here: `AccountDir.exists` says whether one is there."""
    try:
        with open(profile / PREFS_JS, "rb") as f:
            text = f.read(MAX_PREFS_BYTES).decode("utf-8", "replace")
    except OSError:
        return []
    found: dict[str, dict[str, str]] = {}
    for key, value in parse_prefs(text).items():
        m = _SERVER_DIR.match(key)
        if m is not None and isinstance(value, str) and value:
            found.setdefault(m.group(1), {})["rel" if m.group(2) else "abs"] = value
    out = []
    for server in sorted(found, key=lambda s: int(s[len("server"):])):
        forms = found[server]
        # Thunderbird's order: the relative form when it resolves to a folder, else the absolute one
        places = [p for p in (_relative(forms.get("rel", ""), profile), _absolute(forms.get("abs", ""))) if p]
        if places:
            out.append(AccountDir(server, next((p for p in places if p.is_dir()), places[0])))
    return out


def outside_accounts(profile: Path, mail_dirs: tuple[str, ...]) -> list[AccountDir]:
    """The account folders prefs.js places outside the profile's `mail_dirs` (which are scanned anyway),
    each once, missing ones included (the listing says so)."""
    covered = [(profile / top).resolve() for top in mail_dirs]
    out: list[AccountDir] = []
    for account in account_dirs(profile):
        where = account.path.resolve()
        if any(where == c or c in where.parents or where in c.parents for c in covered):
            continue
        covered.append(where)
        out.append(account)
    return out


def folder_prefix(account: AccountDir, profile: Path) -> str:
    """How the folders of an account outside Mail/ and ImapMail/ are named: by the account folder's path,
    relative to the profile when inside it, else absolute ("/home/ann/Archive/imap.example.org/INBOX")."""
    try:
        return account.path.resolve().relative_to(profile.resolve()).as_posix()
    except ValueError:
        return account.path.resolve().as_posix()
