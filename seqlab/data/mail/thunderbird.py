"""Thunderbird's own mail as a source: `seqlab prepare thunderbird[:PROFILE]`.

Where it lives. A profiles folder holds `profiles.ini` and the profiles; the folder is, by platform:

    Linux     ~/.thunderbird, ~/snap/thunderbird/common/.thunderbird (snap),
              ~/.var/app/org.mozilla.Thunderbird/.thunderbird (flatpak)
    macOS     ~/Library/Thunderbird
    Windows   %APPDATA%\\Thunderbird

`profiles.ini` has a `[ProfileN]` section per profile: `Name=`, `Path=` (relative to the profiles folder,
"/"-separated, when `IsRelative=1`; absolute when `IsRelative=0`) and, in older versions, `Default=1` on the
default one. Newer Thunderbird picks the default per installation instead: the `Default=` (a `Path=` value) of
an `[Install<hash>]` section, in `profiles.ini` and in `installs.ini` beside it; that wins over `Default=1`.

Inside a profile, `Mail/<account>/` holds Local Folders and POP accounts and `ImapMail/<server>/` the offline
copies of IMAP folders. Each folder is an mbox file named as the folder (no extension), beside its `.msf`
summary (an index Thunderbird rebuilds, never read here); the subfolders of folder X live in `X.sbd/`. A
profile switched to the maildir store keeps each folder as a directory with `cur/`, one file per message.
Thunderbird leaves a deleted message in its mbox, flagged expunged (0x0008) in its `X-Mozilla-Status` header,
until the folder is compacted: such a message is counted as "deleted" and not read. Trash and Junk folders
(by name, `LEFT_OUT_BY_DEFAULT`) are left out unless `--folders` names them.

Nothing here writes to the profile: Thunderbird may be running, and its files are only opened for reading.
"""

from __future__ import annotations

import configparser
import hashlib
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from seqlab.data.mail.mbox import ENVELOPE_WINDOW, is_envelope, split_mbox
from seqlab.data.mail.message_files import FoundItems, Item
from seqlab.data.mail.mime import MAX_MESSAGE_BYTES
from seqlab.errors import UserError

__all__ = ["Folder", "FolderCount", "Profile", "ProfileItems", "ThunderbirdMail", "is_thunderbird_source",
           "profile_roots", "read_profiles", "thunderbird_mail"]

SOURCE_NAME = "thunderbird"
PROFILES_INI = "profiles.ini"
INSTALLS_INI = "installs.ini"
MAIL_DIRS = ("Mail", "ImapMail")  # Local Folders and POP accounts; the IMAP offline copies
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
class Profile:
    """One Thunderbird profile: its name in profiles.ini (or its folder's name) and its folder."""

    name: str
    path: Path


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
        total = sum(c.messages - c.deleted for c in counts)
        lines.append(f"  reading {len(counts)} folder{'s' * (len(counts) != 1)}, {total} messages")
        return "\n".join(lines)


def _store_note(folder: Folder) -> str:
    return " (maildir)" if folder.store == "maildir" else ""


def is_thunderbird_source(source: str) -> bool:
    """True for the SOURCE `thunderbird` and `thunderbird:PROFILE`."""
    name = str(source).strip()
    return name.lower() == SOURCE_NAME or name[:len(SOURCE_NAME) + 1].lower() == SOURCE_NAME + ":"


def profile_roots(platform: str | None = None, home: Path | None = None,
                  environ: Mapping[str, str] | None = None) -> list[Path]:
    """The folders Thunderbird keeps profiles.ini in on `platform` (`sys.platform` by default), in the order
    they are tried."""
    platform = sys.platform if platform is None else platform
    env = os.environ if environ is None else environ
    home = Path.home() if home is None else Path(home)
    if platform.startswith(("win", "cygwin")):
        appdata = env.get("APPDATA")
        return [(Path(appdata) if appdata else home / "AppData" / "Roaming") / "Thunderbird"]
    if platform == "darwin":
        return [home / "Library" / "Thunderbird"]
    return [home / ".thunderbird", home / "snap" / "thunderbird" / "common" / ".thunderbird",
            home / ".var" / "app" / "org.mozilla.Thunderbird" / ".thunderbird"]


def _read_ini(path: Path) -> configparser.ConfigParser | None:
    """The ini file at `path` (None when there is none); UserError when it is not an ini file."""
    # Keys keep their case and values their "%": Thunderbird writes neither interpolation nor lower-case keys.
    parser = configparser.ConfigParser(interpolation=None, strict=False, delimiters=("=",), comment_prefixes=(";", "#"))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            parser.read_file(f)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UserError(f"{path} cannot be read ({exc.strerror}).") from None
    except configparser.Error as exc:
        reason = str(exc).splitlines()[0].rstrip(".")
        raise UserError(f"{path} is not a profiles file Thunderbird writes ({reason}).") from None
    return parser


def _norm(raw: str) -> str:
    return raw.strip().replace("\\", "/").rstrip("/")


def read_profiles(root: Path) -> tuple[list[Profile], Profile | None]:
    """The profiles `root/profiles.ini` lists, and the default one (None when none is marked and there are
    several). No profiles.ini: ([], None)."""
    parser = _read_ini(root / PROFILES_INI)
    if parser is None:
        return [], None
    installs = [parser.get(s, "Default", fallback="") for s in parser.sections() if s.lower().startswith("install")]
    extra = _read_ini(root / INSTALLS_INI)
    if extra is not None:
        installs += [extra.get(s, "Default", fallback="") for s in extra.sections()]
    profiles: list[Profile] = []
    raws: list[str] = []
    marked: Profile | None = None
    for section in parser.sections():
        if not section.lower().startswith("profile"):
            continue
        raw = parser.get(section, "Path", fallback="").strip()
        if not raw:
            continue
        relative = parser.get(section, "IsRelative", fallback="").strip()
        if relative == "1" or (relative == "" and not _is_absolute(raw)):
            path = root.joinpath(*[p for p in re.split(r"[\\/]", raw) if p])
        else:
            path = Path(raw)
        profile = Profile(parser.get(section, "Name", fallback="").strip() or raw, path)
        profiles.append(profile)
        raws.append(_norm(raw))
        if marked is None and parser.get(section, "Default", fallback="").strip() == "1":
            marked = profile
    for wanted in installs:  # the installation's default wins over the older Default=1
        if _norm(wanted) in raws:
            return profiles, profiles[raws.index(_norm(wanted))]
    return profiles, marked if marked is not None else (profiles[0] if len(profiles) == 1 else None)


def _is_absolute(raw: str) -> bool:
    return raw.startswith(("/", "\\")) or bool(re.match(r"^[A-Za-z]:[\\/]", raw))


def _looks_like_profile(path: Path) -> bool:
    return any((path / d).is_dir() for d in MAIL_DIRS)


def find_profile(selector: str | None, *, platform: str | None = None, home: Path | None = None,
                 environ: Mapping[str, str] | None = None) -> Profile:
    """The profile `selector` names (its Name=, or its folder's path), or the default one when it is None."""
    roots = profile_roots(platform, home, environ)
    profiles: list[Profile] = []
    default: Profile | None = None
    for root in roots:
        found, marked = read_profiles(root)
        profiles += found
        if default is None and marked is not None:
            default = marked
    if selector:
        return _named(selector, profiles, roots)
    if not profiles:
        listed = [r for r in roots if (r / PROFILES_INI).is_file()]
        where = (f"the {PROFILES_INI} in {_or_list(listed)} lists none" if listed
                 else f"there is no {PROFILES_INI} in {_or_list(roots)}")
        raise UserError(f"No Thunderbird profile was found: {where}; name a profile folder with thunderbird:PATH.")
    if default is None:
        raise UserError(f"Thunderbird has {len(profiles)} profiles and none is marked the default; choose one with "
                        f"thunderbird:NAME ({_profile_list(profiles)}).")
    return _existing(default)


def _named(selector: str, profiles: list[Profile], roots: list[Path]) -> Profile:
    for same in (lambda p: p.name == selector, lambda p: p.name.casefold() == selector.casefold()):
        matches = [p for p in profiles if same(p)]
        if len(matches) == 1:
            return _existing(matches[0])
        if len(matches) > 1:
            raise UserError(f"{len(matches)} Thunderbird profiles are named {selector!r} ("
                            f"{', '.join(str(p.path) for p in matches)}); choose one with thunderbird:PATH.")
    folder = Path(selector).expanduser()
    for p in profiles:  # by folder: the Path= value as written, or the same folder
        if _same_folder(p.path, folder):
            return _existing(p)
    if folder.is_dir() and _looks_like_profile(folder):  # a profile profiles.ini does not list (a copy, a backup)
        return Profile(folder.name, folder)
    if profiles:
        raise UserError(f"No Thunderbird profile is named {selector!r}; the profiles are {_profile_list(profiles)}.")
    raise UserError(f"No Thunderbird profile is named {selector!r}: there is no {PROFILES_INI} in {_or_list(roots)}, "
                    f"and {folder} is not a profile folder (one with Mail or ImapMail in it).")


def _same_folder(a: Path, b: Path) -> bool:
    if a == b:
        return True
    try:
        return a.exists() and b.exists() and a.samefile(b)
    except OSError:
        return False


def _existing(profile: Profile) -> Profile:
    if not profile.path.is_dir():
        raise UserError(f"The Thunderbird profile {profile.name!r} is listed at {profile.path}, which is not a folder.")
    return profile


def _profile_list(profiles: list[Profile]) -> str:
    return ", ".join(f"{p.name} ({p.path})" for p in profiles)


def _or_list(paths: list[Path]) -> str:
    names = [str(p) for p in paths]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


# ---------------------------------------------------------------- folders


def profile_folders(profile: Path) -> list[Folder]:
    """Every mail folder of the profile, Mail/ before ImapMail/, each account's folders in name order, a
    folder before its subfolders."""
    out: list[Folder] = []
    for top in MAIL_DIRS:
        for account in _sorted_entries(profile / top):
            if account.is_dir(follow_symlinks=False):
                _collect(Path(account.path), f"{top}/{account.name}", out)
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
    return ThunderbirdMail(profile, read, left_out)


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
