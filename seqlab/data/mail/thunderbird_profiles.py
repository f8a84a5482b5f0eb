"""Finding Thunderbird's profiles: which folder `seqlab prepare thunderbird[:PROFILE]` reads.

Where it lives. A profiles folder holds `profiles.ini` and the profiles; the folder is, by platform:

    Linux     ~/.thunderbird, ~/snap/thunderbird/common/.thunderbird (snap),
              ~/.var/app/org.mozilla.Thunderbird/.thunderbird (flatpak)
    macOS     ~/Library/Thunderbird
    Windows   %APPDATA%\\Thunderbird

`profiles.ini` has a `[ProfileN]` section per profile: `Name=`, `Path=` (relative to the profiles folder,
"/"-separated, when `IsRelative=1`; absolute when `IsRelative=0`) and, in older versions, `Default=1` on the
default one. Newer Thunderbird picks the default per installation instead: the `Default=` (a `Path=` value) of
an `[Install<hash>]` section, in `profiles.ini` and in `installs.ini` beside it; that wins over `Default=1`.
"""

from __future__ import annotations

import configparser
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from seqlab.errors import UserError

__all__ = ["INSTALLS_INI", "MAIL_DIRS", "PROFILES_INI", "Profile", "find_profile", "profile_roots", "read_profiles"]

PROFILES_INI = "profiles.ini"
INSTALLS_INI = "installs.ini"
MAIL_DIRS = ("Mail", "ImapMail")  # Local Folders and POP accounts; the IMAP offline copies


@dataclass(frozen=True)
class Profile:
    """One Thunderbird profile: its name in profiles.ini (or its folder's name) and its folder."""

    name: str
    path: Path


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
