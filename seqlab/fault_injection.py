"""Fault injection for the crash tests: named kill points, inert unless a test sets `SEQLAB_TEST_KILL_AT`.

The tests of "a crash never leaves a partial DATA_DIR or RUN_DIR" (tests/test_breaking_*.py) run
`python -m seqlab ...` as a subprocess with `SEQLAB_TEST_KILL_AT` set; the process then sends itself
SIGKILL at the first kill point whose name matches it (an `fnmatch` pattern; `PATTERN#N` waits for the
Nth match; `PATTERN@INT` sends SIGINT instead, a Ctrl-C at an exact moment). This is a test hook, not a
feature: nothing a user runs sets the variable, and unset it costs one `is None` test per kill point.

Kill points are named `DIR/FILE:before`, `DIR/FILE:during` (half the bytes are in the temporary file; for
a stream, all of them, not yet fsynced) and `DIR/FILE:after` (renamed into place) by `seqlab.durable`,
with DIR the parent folder's name; the checkpoint code and `prepare` add a few of their own.
"""

from __future__ import annotations

import fnmatch
import os
import signal
from pathlib import Path

__all__ = ["TEST_KILL_ENV", "file_point", "kill_point"]

TEST_KILL_ENV = "SEQLAB_TEST_KILL_AT"
# Read once: the variable is set by a test for the whole life of a `python -m seqlab ...` subprocess.
_KILL_AT: str | None = os.environ.get(TEST_KILL_ENV) or None
_kill_matches = 0


def kill_point(where: str) -> None:
    """Test-only: SIGKILL this process if `where` is the kill point `SEQLAB_TEST_KILL_AT` names."""
    global _kill_matches
    if _KILL_AT is None:
        return
    spec, _, sig = _KILL_AT.partition("@")
    pattern, _, nth = spec.partition("#")
    if fnmatch.fnmatchcase(where, pattern):
        _kill_matches += 1
        if _kill_matches == int(nth or 1):
            os.kill(os.getpid(), getattr(signal, f"SIG{sig}") if sig else getattr(signal, "SIGKILL", signal.SIGTERM))


def file_point(path: Path, phase: str) -> None:
    """Test-only: the kill point `DIR/FILE:phase` of a durable write of `path`."""
    if _KILL_AT is not None:  # build the name only when a test asked for kill points
        kill_point(f"{path.parent.name}/{path.name}:{phase}")
