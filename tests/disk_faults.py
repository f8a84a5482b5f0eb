"""A full disk, simulated: every durable write of seqlab goes through `os.write` (seqlab/durable.py),
so patching `os.write` with a `FullDisk` makes one chosen write come out short and every later write
under a folder fail with ENOSPC, as on a disk that filled up. Writes elsewhere (pytest's own, pipes) pass."""

from __future__ import annotations

import errno
import fnmatch
import os
from pathlib import Path

HAS_PROC_FD = Path("/proc/self/fd").is_dir()  # how a descriptor's file is found


class FullDisk:
    """`os.write` for files whose path matches `pattern`: the `nth` such call writes half its bytes and
    returns short; from then on every write under `root` fails with ENOSPC (the disk is full)."""

    def __init__(self, root: Path, pattern: str, nth: int = 1) -> None:
        self.root, self.pattern, self.nth = str(root), pattern, nth
        self.calls, self.full = 0, False
        self.real = os.write

    def __call__(self, fd: int, data: bytes) -> int:
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return self.real(fd, data)
        if not path.startswith(self.root):
            return self.real(fd, data)
        if self.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if fnmatch.fnmatchcase(path, self.pattern):
            self.calls += 1
            if self.calls == self.nth:
                self.full = True
                return self.real(fd, bytes(memoryview(data)[: len(data) // 2]))
        return self.real(fd, data)
