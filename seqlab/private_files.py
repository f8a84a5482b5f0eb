"""Files only the person can read: every file seqlab writes is 0600 and every folder it makes 0700.

Everything seqlab writes is mail or derived from it: a DATA_DIR (emails.jsonl, the token files, the tokenizer),
a RUN_DIR (weights, checkpoints, logs, calibration, phrases, the server's personal folder), a corpus cache,
a study's plots and reports. Another user of the machine must not read any of it, whatever the caller's umask.
Two lines of defence:

- `private_umask()`: the umask 0o077 while a command (`seqlab.cli.main`) or an API call that writes runs, so
  every file any library creates (torch, numpy, tokenizers, matplotlib, shutil, tarfile's folders, a worker
  process, which inherits the umask) starts without group or other bits.
- Explicit modes where seqlab creates files and folders itself (`FILE_MODE` through `private_opener` and
  `seqlab.durable`, `DIR_MODE` through `make_private_dirs`), so code reached without the CLI or the API (a
  library caller of `seqlab.runs`, a test) writes private files too.

A folder the person already has is never chmod-ed behind their back: a DATA_DIR or RUN_DIR made before
seqlab did this, or opened up by hand, gets a warning (`warn_if_open`) naming it and the one command that
makes it private. The CLI prints it as one line on stderr (`warnings_as_lines`); a Python caller gets a
`warnings.warn` of `OpenToOthersWarning`, which it can filter like any other.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import stat
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "PRIVATE_UMASK",
    "OpenToOthersWarning",
    "fix_command",
    "make_private_dirs",
    "open_entry",
    "private_opener",
    "private_umask",
    "warn_if_open",
    "warnings_as_lines",
]

PRIVATE_UMASK = 0o077  # no permission bit for the group or others
FILE_MODE = 0o600
DIR_MODE = 0o700


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """The umask 0o077 (kept stricter where the caller's is) inside the block; the caller's back after.

    Usable as a decorator. The umask is the process's, so a thread writing at the same time gets it too:
    it can only make that thread's new files more private.
    """
    old = os.umask(PRIVATE_UMASK)
    os.umask(old | PRIVATE_UMASK)
    try:
        yield
    finally:
        os.umask(old)


def private_opener(path: str, flags: int) -> int:
    """`open(path, mode, opener=private_opener)`: a file created 0600, not with the umask's 0666."""
    return os.open(path, flags, FILE_MODE)


def make_private_dirs(path: Path | str) -> None:
    """`path` and each missing parent created 0700; folders that already exist are left as they are.

    Like `Path.mkdir(parents=True, exist_ok=True)`, whose parents ignore `mode`: a parent seqlab creates holds
    as much as the folder in it. A non-folder in the way raises FileExistsError.
    """
    path = Path(path)
    missing = []
    p = path
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:  # made meanwhile by another process: fine if it is a folder (checked below)
            pass
    if not path.is_dir():
        raise FileExistsError(errno.EEXIST, "exists and is not a directory", str(path))


class OpenToOthersWarning(UserWarning):
    """A folder seqlab opened (DATA_DIR, RUN_DIR, a cache) can be read by other users of this machine."""


def open_entry(path: Path | str) -> Path | None:
    """The first of `path` and everything under it with a permission bit for the group or others, else None.

    Links inside are not followed (their own modes mean nothing); `path` itself may be one. Always None on
    Windows, whose permissions are not mode bits.
    """
    if os.name == "nt":
        return None
    path = Path(path)
    try:
        if stat.S_IMODE(os.stat(path).st_mode) & PRIVATE_UMASK:
            return path
    except OSError:
        return None
    if not path.is_dir():
        return None
    stack = [path]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                continue
            if stat.S_IMODE(st.st_mode) & PRIVATE_UMASK:
                return Path(entry.path)
            if stat.S_ISDIR(st.st_mode):
                stack.append(Path(entry.path))
    return None


def fix_command(path: Path | str) -> str:
    """The shell command that takes every group and other permission off `path` and what it holds."""
    return f"chmod -R go= {shlex.quote(str(path))}"


def warn_if_open(*paths: Path | str | None) -> None:
    """An `OpenToOthersWarning` for each existing path in `paths` that other users can read (None skipped).

    The message names the path, the first entry found open (with its mode), and the command that fixes it,
    spelled to run as printed. The warning points at the first caller outside seqlab.
    """
    for path in paths:
        if path is None:
            continue
        found = open_entry(path)
        if found is None:
            continue
        mode = stat.S_IMODE(os.stat(found).st_mode)
        where = "it is" if found == Path(path) else f"{found} is"
        warnings.warn(OpenToOthersWarning(
            f"{path} can be read by other users of this machine ({where} mode {mode:04o}); to make it yours "
            f"only, run: {fix_command(path)}"), stacklevel=_outside_seqlab())


def _outside_seqlab() -> int:
    """The stacklevel of the first frame that is not seqlab's (nor contextlib's, which runs the decorators)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] in ("seqlab", "contextlib"):
        frame, level = frame.f_back, level + 1
    return level


@contextlib.contextmanager
def warnings_as_lines() -> Iterator[None]:
    """Inside the block an `OpenToOthersWarning` is one line on stderr, `seqlab: warning: MESSAGE`, each time:
    the form of every warning the command line gives (the warnings module's adds a file and line)."""
    with warnings.catch_warnings():  # restores the filters and showwarning on the way out
        warnings.simplefilter("always", OpenToOthersWarning)
        shown = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: object = None, line: str | None = None) -> None:
            if issubclass(category, OpenToOthersWarning):
                print(f"seqlab: warning: {message}", file=sys.stderr, flush=True)
            else:
                shown(message, category, filename, lineno, file, line)  # type: ignore[arg-type]

        warnings.showwarning = show
        yield
