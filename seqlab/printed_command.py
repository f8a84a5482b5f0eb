"""The commands seqlab prints for a person to type, spelled so that they run as printed.

A newcomer runs `.venv/bin/seqlab demo` (or `make demo`) without activating the virtual environment, so
a printed `seqlab serve RUN` would not be found by their shell. `printed_command` therefore starts each
printed command with the program as this process was started: the bare name when the shell's PATH finds
that same file, else its path relative to the working directory when it lies under it
(`.venv/bin/seqlab`), else its absolute path; and `PYTHON -m seqlab` when seqlab was not started through
its console script (`python -m seqlab`, torchrun, or the Python API). Imports nothing of seqlab, so any
room may use it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

SCRIPT = "seqlab"  # the console script's name (pyproject.toml, [project.scripts])


def printed_command(*args: str | Path) -> str:
    """`seqlab ARGS...` as a shell line that runs as printed from the current directory, each word quoted."""
    return shlex.join([*_program(), *(str(a) for a in args)])


def _program() -> list[str]:
    """The words that start seqlab as this process was started (see the module docstring)."""
    started = sys.argv[0] if sys.argv else ""
    if Path(started).name == SCRIPT and os.path.isfile(started):
        return [_spelled(started, SCRIPT)]
    python = sys.executable or "python3"
    return [_spelled(python, Path(python).name), "-m", "seqlab"]


def _spelled(path: str, name: str) -> str:
    """`name` when PATH finds `path` under it; `path` relative to the cwd when under it; else absolute.

    Symbolic links are kept as given (os.path.abspath, not resolve): a venv's `bin/python` is a link
    out of the venv, and the path through the venv is the one that runs with the venv's packages.
    """
    found = shutil.which(name)
    try:
        if found and os.path.samefile(found, path) and Path(found).parent == Path(os.path.abspath(path)).parent:
            return name
    except OSError:
        pass
    absolute = os.path.abspath(path)
    cwd = os.getcwd()
    if absolute.startswith(cwd.rstrip(os.sep) + os.sep):
        relative = os.path.relpath(absolute, cwd)
        return relative if os.sep in relative else f".{os.sep}{relative}"  # a bare name would be looked up on PATH
    return absolute
