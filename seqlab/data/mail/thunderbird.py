"""Thunderbird's own mail as a source: `seqlab prepare thunderbird[:PROFILE]`. Which profile is read
is found by `thunderbird_profiles`; this module reads its mail folders.

Inside a profile, `Mail/<account>/` holds Local Folders and POP accounts and `ImapMail/<server>/` the offline
copies of IMAP folders. Each folder is an mbox file named as the folder (no extension), beside its `.msf`
summary (an index Thunderbird rebuilds, never read here); the subfolders of folder X live in `X.sbd/`. A
profile switched to the maildir store keeps each folder as a directory with `cur/`, one file per message.
Thunderbird leaves a deleted message in its mbox, flagged expunged (0x0008) in its `X-Mozilla-Status` header,
until the folder is compacted: such a message is counted as "deleted" and not read. Trash and Junk folders
(by name, `LEFT_OUT_BY_DEFAULT`) are left out unless `--folders` names them.

An account whose folder was moved elsewhere (its Local Directory setting, recorded in the profile's prefs.js:
`thunderbird_prefs`) is read there too, its folders named by that folder's path.

Nothing here writes to the profile: Thunderbird may be running, and its files are only opened for reading.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from seqlab.data.mail.mbox import ENVELOPE_WINDOW, is_envelope, split_mbox
from seqlab.data.mail.message_files import FoundItems, Item
from seqlab.data.mail.mime import MAX_MESSAGE_BYTES
from seqlab.data.mail.thunderbird_prefs import AccountDir, folder_prefix, outside_accounts
from seqlab.data.mail.thunderbird_profiles import MAIL_DIRS, Profile, find_profile
from seqlab.errors import UserError

__all__ = ["Folder", "FolderCount", "ProfileItems", "ThunderbirdMail", "is_thunderbird_source", "thunderbird_mail"]

SOURCE_NAME = "thunderbird"
# Folder names (the last part, case-folded) left out unless --folders names them: Thunderbird's Trash and Junk
# and the names IMAP servers give theirs (Gmail's Spam and Bin, Outlook's Deleted Items and Junk Email).
LEFT_OUT_BY_DEFAULT = frozenset({"trash", "junk", "spam", "bin", "deleted items", "deleted messages",
                                 "junk e-mail", "junk email"})
# Files beside the mbox files that are never mail; anything else is judged by its first line.
_NOT_MBOX_SUFFIXES = frozenset({".msf", ".dat", ".html", ".json", ".sqlite", ".log", ".js", ".tmp", ".bak",
                                ".wdseml", ".eml", ".lock"})
MSG_FLAG_EXPUNGED = 0x0008
_STATUS = re.compile(rb"^X-Mozilla-Status:[ \t]*([0-9A-Fa-f]{1,8})[ \t]*\r?$", re.M | re.I)


@dataclass(frozen=True)
class Folder:
    """One mail folder of a profile: `name` is its place, "Mail/Local Folders/Inbox" or
    "ImapMail/imap.example.org/INBOX/Lists" (the `.sbd` of subfolders left out), `store` "mbox" or "maildir"."""

    name: str
    path: Path
    store: str

    @property
    def leaf(self) -> str:
        return self.name.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class FolderCount:
    """A folder and what it holds: messages (deleted ones included) and those Thunderbird marked deleted."""

    folder: Folder
    messages: int
    deleted: int


@dataclass(frozen=True)
class ThunderbirdMail:
    """A profile's folders: those read (in reading order) and those left out (Trash and Junk by default, or
    what `--folders` did not name)."""

    profile: Profile
    folders: tuple[Folder, ...]
    left_out: tuple[Folder, ...]
    elsewhere: tuple[AccountDir, ...] = ()  # account folders prefs.js places outside Mail/ and ImapMail/

    def items(self) -> ProfileItems:
        """Every message of the folders read, as `(label, raw bytes | skip reason)`: label `path:i` (`path` of
        the file for a maildir folder); a tracked source for `prepare --update` (`ProfileItems`)."""
        return ProfileItems(self.profile, self.folders)

    def counts(self) -> list[FolderCount]:
        """Messages and deleted messages of each folder read (one pass over each file, no parsing)."""
        out = []
        for folder in self.folders:
            messages = deleted = 0
            for _, raw in _folder_items(folder):
                messages += 1
                deleted += raw == "deleted"
            out.append(FolderCount(folder, messages, deleted))
        return out

    def listing(self, counts: Sequence[FolderCount] | None = None) -> str:
        """What `seqlab prepare thunderbird` prints before reading: the profile, each folder with its counts,
        what is left out."""
        counts = self.counts() if counts is None else counts
        lines = [f"Thunderbird profile {self.profile.name} ({self.profile.path})"]
        width = max((len(c.folder.name) for c in counts), default=0)
        for c in counts:
            note = f" ({c.deleted} deleted, not read)" if c.deleted else ""
            lines.append(f"  {c.folder.name:<{width}}  {c.messages:>7} messages{note}{_store_note(c.folder)}")
        if self.left_out:
            lines.append("  left out: " + ", ".join(f.name for f in self.left_out))
        for account in self.elsewhere:
            lines.append(f"  prefs.js places {account.server}'s folders in {account.path}"
                         + ("" if account.exists else ", which is not there: not read"))
        total = sum(c.messages - c.deleted for c in counts)
        lines.append(f"  reading {len(counts)} folder{'s' * (len(counts) != 1)}, {total} messages")
        return "\n".join(lines)


def _store_note(folder: Folder) -> str:
    return " (maildir)" if folder.store == "maildir" else ""


def is_thunderbird_source(source: str) -> bool:
    """True for the SOURCE `thunderbird` and `thunderbird:PROFILE`."""
    name = str(source).strip()
    return name.lower() == SOURCE_NAME or name[:len(SOURCE_NAME) + 1].lower() == SOURCE_NAME + ":"


# ---------------------------------------------------------------- folders


def profile_folders(profile: Path) -> list[Folder]:
    """Every mail folder of the profile, Mail/ before ImapMail/ before the account folders prefs.js places
    elsewhere, each account's folders in name order, a folder before its subfolders."""
    out: list[Folder] = []
    for top in MAIL_DIRS:
        for account in _sorted_entries(profile / top):
            if account.is_dir(follow_symlinks=False):
                _collect(Path(account.path), f"{top}/{account.name}", out)
    for moved in outside_accounts(profile, MAIL_DIRS):
        if moved.exists:
            _collect(moved.path, folder_prefix(moved, profile), out)
    return out


def _sorted_entries(path: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(path) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError:
        return []


def _collect(directory: Path, prefix: str, out: list[Folder]) -> None:
    for entry in _sorted_entries(directory):
        name = entry.name
        if name.startswith("."):
            continue
        if entry.is_dir(follow_symlinks=False):
            if name.endswith(".sbd"):
                _collect(Path(entry.path), f"{prefix}/{name[:-4]}", out)
            elif (Path(entry.path) / "cur").is_dir():
                out.append(Folder(f"{prefix}/{name}", Path(entry.path), "maildir"))
            continue
        dot = name.rfind(".")
        if dot > 0 and name[dot:].lower() in _NOT_MBOX_SUFFIXES:
            continue
        if entry.is_file() and _is_mbox(Path(entry.path)):
            out.append(Folder(f"{prefix}/{name}", Path(entry.path), "mbox"))


def _is_mbox(path: Path) -> bool:
    """An empty file (a folder with nothing in it) or one that starts with an envelope line."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return not head or is_envelope(head.lstrip(b"\r\n"))


def choose_folders(folders: list[Folder], wanted: Sequence[str] | None, profile: Profile
                   ) -> tuple[tuple[Folder, ...], tuple[Folder, ...]]:
    """(read, left out): the folders `wanted` names (by last part, "Local Folders/Inbox" or the whole name, any
    case), or every folder but Trash and Junk when `wanted` is empty."""
    if not wanted:
        read = tuple(f for f in folders if f.leaf.casefold() not in LEFT_OUT_BY_DEFAULT)
    else:
        chosen: set[Folder] = set()
        for raw in wanted:
            key = raw.strip().strip("/").casefold()
            hits = [f for f in folders if key in _folder_keys(f)]
            if not hits:
                shown = ", ".join(f.name for f in folders) or "none"
                raise UserError(f"--folders {raw!r} names no folder of the Thunderbird profile {profile.name}; "
                                f"its folders are {shown}.")
            chosen.update(hits)
        read = tuple(f for f in folders if f in chosen)
    return read, tuple(f for f in folders if f not in read)


def _folder_keys(folder: Folder) -> set[str]:
    parts = folder.name.casefold().split("/")
    return {"/".join(parts[i:]) for i in range(len(parts))}


def thunderbird_mail(source: str = SOURCE_NAME, folders: Sequence[str] | None = None, *,
                     platform: str | None = None, home: Path | None = None,
                     environ: Mapping[str, str] | None = None) -> ThunderbirdMail:
    """The profile `source` names (`thunderbird`: the default one; `thunderbird:NAME` or `thunderbird:PATH`)
    and the folders to read. UserError when there is no Thunderbird, no such profile, or no mail folder."""
    text = str(source).strip()
    if not is_thunderbird_source(text):
        raise UserError(f"{source!r} is not a Thunderbird source; write thunderbird or thunderbird:PROFILE.")
    selector = text[len(SOURCE_NAME) + 1:].strip() or None
    profile = find_profile(selector, platform=platform, home=home, environ=environ)
    found = profile_folders(profile.path)
    if not found:
        raise UserError(f"The Thunderbird profile {profile.name} ({profile.path}) has no mail folders in "
                        f"{' or '.join(MAIL_DIRS)}.")
    read, left_out = choose_folders(found, folders, profile)
    return ThunderbirdMail(profile, read, left_out, tuple(outside_accounts(profile.path, MAIL_DIRS)))


# ---------------------------------------------------------------- messages


class ProfileItems(FoundItems):
    """A profile's messages, and a tracked source for `prepare --update` (the `TrackedSource` of
    `seqlab/data/prepare/ledger.py`): `items(since)` leaves out what an earlier `state()` says was read.

    Per folder it records, for an mbox, its size, message count and digests of its first 4 KiB and of the 4 KiB
    before its end; for a maildir folder, its file names. Thunderbird rewrites a message's X-Mozilla-Status,
    -Status2 and -Keys values in place when the message is read, flagged, tagged or deleted (the bytes around
    them never move), so the digests leave those values out: a folder whose only change is flags is not read
    again. One that grew with its old part so kept, ending in a blank line, the new bytes opening with an
    envelope line (Thunderbird appends new mail), is read from its old end, labels numbered on; anything else
    (compacted, repaired, another profile) is read whole, and dedupe drops what the DATA_DIR holds. An mbox is
    read only up to the size stamped before reading, so mail that arrives meanwhile is read by the next update.
    """

    def __init__(self, profile: Profile, folders: Sequence[Folder]) -> None:
        super().__init__(())
        self.profile, self.folders = profile, tuple(folders)
        self._state: dict[str, Any] = {"profile": str(profile.path), "folders": {}}

    def __iter__(self) -> Iterator[Item]:
        return self.items(None)

    def state(self) -> dict[str, Any]:
        """What the last `items` read, JSON-able: the `since` of the next update."""
        return self._state

    def items(self, since: dict[str, Any] | None) -> Iterator[Item]:
        old = since.get("folders") if isinstance(since, dict) and since.get("profile") == str(self.profile.path) else {}
        old = old if isinstance(old, dict) else {}
        records: dict[str, dict[str, Any]] = {}
        self._state = {"profile": str(self.profile.path), "folders": records}
        for folder in self.folders:
            was = old.get(folder.name)
            was = was if isinstance(was, dict) and was.get("store") == folder.store else None
            records[folder.name] = record = {}
            if folder.store == "maildir":
                yield from _maildir_items(folder.path, was, record)
            else:
                yield from _mbox_items(folder.path, was, record)


_EDGE = 4096  # bytes at an mbox's start and before its old end that must be unchanged (flags aside) for a tail read
_MOZ_VALUES = re.compile(rb"(X-Mozilla-(?:Status2?|Keys):)[^\r\n]*")


def _edge_digest(data: bytes) -> str:
    return hashlib.sha256(_MOZ_VALUES.sub(rb"\1", data)).hexdigest()


class _Bounded:
    """The first `left` bytes from a file's current position: an mbox read up to the size stamped."""

    def __init__(self, f: BinaryIO, left: int) -> None:
        self.f, self.left = f, left

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self.f.read(n) if n > 0 else b""
        self.left -= len(data)
        return data


def _folder_items(folder: Folder) -> Iterator[Item]:
    if folder.store == "maildir":
        return _maildir_items(folder.path, None, {})
    return _mbox_items(folder.path, None, {})


def _mbox_items(path: Path, since: dict[str, Any] | None, record: dict[str, Any]) -> Iterator[Item]:
    """The messages of an mbox folder (those after `since`'s, when it still describes the file), label `path:i`;
    `record` gets what was read."""
    label = str(path)
    n = 0
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(min(size, _EDGE))
            f.seek(max(0, size - _EDGE))
            tail = f.read(min(size, _EDGE))
            start, n = _new_part(f, since, head, size) if since is not None else (0, 0)
            record.update(store="mbox", size=size, head=_edge_digest(head), tail=_edge_digest(tail),
                          ends_blank=tail.endswith((b"\n\n", b"\n\r\n")) or not size)
            f.seek(start)
            for msg in split_mbox(_Bounded(f, size - start), MAX_MESSAGE_BYTES):  # the cap read now: tests lower it
                yield f"{label}:{n}", _judge(msg)
                n += 1
            record["messages"] = n
    except OSError:  # unreadable, or a read failed part way: what was read stays, the rest is one skip
        record.clear()  # and the next update reads the folder whole
        yield f"{label}:{n}", "unreadable"


def _new_part(f: BinaryIO, since: dict[str, Any], head: bytes, size: int) -> tuple[int, int]:
    """(offset, messages before it) of what `since` did not read: (size, count) for an mbox unchanged but for
    flags, (old size, count) for one grown by appending, (0, 0) to read it whole."""
    old, count = since.get("size"), since.get("messages")
    if not (isinstance(old, int) and isinstance(count, int)) or isinstance(old, bool) or not 0 < old <= size:
        return 0, 0
    f.seek(max(0, old - _EDGE))
    old_tail = f.read(min(old, _EDGE))
    if _edge_digest(head[:min(old, _EDGE)]) != since.get("head") or _edge_digest(old_tail) != since.get("tail"):
        return 0, 0
    if old == size:
        return size, count
    if not since.get("ends_blank") or not is_envelope(f.read(ENVELOPE_WINDOW)):
        return 0, 0
    return old, count


def _maildir_items(path: Path, since: dict[str, Any] | None, record: dict[str, Any]) -> Iterator[Item]:
    """The messages of a maildir folder (those whose file names `since` does not list); `record` gets the names.
    Thunderbird never renames a message's file, so a name seen is a message read."""
    known = set(since.get("names", ())) if since is not None else set()
    names: list[str] = []
    record.update(store="maildir", names=names)
    for sub in ("cur", "new"):
        for entry in _sorted_entries(path / sub):
            if entry.name.startswith(".") or not entry.is_file():
                continue
            name = f"{sub}/{entry.name}"
            names.append(name)
            if name in known:
                continue
            try:
                with open(entry.path, "rb") as f:
                    data = f.read(MAX_MESSAGE_BYTES + 1)
            except OSError:
                names.pop()  # read again next time
                yield entry.path, "unreadable"
                continue
            yield entry.path, ("too_large" if len(data) > MAX_MESSAGE_BYTES else _judge(data))


def _judge(msg: bytes | str) -> bytes | str:
    """The message, or "deleted" when Thunderbird flagged it expunged (a str is already a skip reason)."""
    if isinstance(msg, str):
        return msg
    return "deleted" if is_expunged(msg) else msg


def is_expunged(raw: bytes) -> bool:
    """True when the message's header (up to its first blank line) has an X-Mozilla-Status with 0x0008 set."""
    end = len(raw)
    for blank in (b"\n\n", b"\n\r\n"):
        at = raw.find(blank, 0, end)
        if at >= 0:
            end = at + 1
    m = _STATUS.search(raw, 0, end)
    return m is not None and int(m.group(1), 16) & MSG_FLAG_EXPUNGED != 0
