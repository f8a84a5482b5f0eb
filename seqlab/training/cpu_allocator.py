"""Keep the memory a CPU training step frees for the next step, instead of handing it back to the kernel.

A training step allocates the same large tensors every step (activations, their gradients) and frees them
all by its end. With glibc's default malloc each block of 32 MiB and up is its own `mmap`, unmapped when
freed, and free memory at the top of the heap is trimmed away; the next step then maps the same amount
again and the kernel zeroes every 4 KiB page on first touch. That cost falls on whichever kernel first
writes a fresh block (large elementwise ones, GELU and its backward, slowed most), and it made the
training step measurably slower on a 2-core CPU (`seqlab bench`, "throughput": the `freed memory kept`
rows; the experiments index).

`keep_freed_memory()` sets, for the duration of a `with` block, what tcmalloc or jemalloc would do by
design: no `mmap` for large blocks (M_MMAP_MAX = 0) and no trimming (M_TRIM_THRESHOLD at its largest),
so freed blocks are reused as they are. On leaving it restores glibc's settings and hands the free memory
back (`malloc_trim`), so a notebook that trained a model gets it back. It does nothing where the C
library is not glibc (macOS, musl), and the block runs unchanged.

The cost is memory the process keeps: its peak heap, which a training loop reaches in its first steps
anyway, plus the blocks a new one could not reuse. torch asks for 64-byte-aligned blocks, and an aligned
request can be a few bytes too large for the freed block of its size, so the heap may grow by a few
blocks of a size before the freed ones merge and are reused. A training step frees many blocks at once
and they merge at once: the trainer's peak resident memory stayed where it was (the experiments index).
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
import threading
from collections.abc import Iterator

# mallopt parameters and glibc's defaults (malloc.h; mallopt(3))
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
DEFAULT_TRIM_THRESHOLD, DEFAULT_MMAP_MAX = 128 * 1024, 65536
NEVER_TRIM = 2**31 - 1  # mallopt takes an int


def _glibc() -> ctypes.CDLL | None:
    """The process's C library when it is glibc (it alone has gnu_get_libc_version), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - the attribute lookup is the test
        libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _glibc()
_depth = 0  # blocks open, nested or in other threads: the first sets, the last to leave restores
_lock = threading.Lock()


def applies() -> bool:
    """Whether `keep_freed_memory` changes anything here (glibc)."""
    return _LIBC is not None


@contextlib.contextmanager
def keep_freed_memory(enabled: bool = True) -> Iterator[bool]:
    """Within the block, freed memory stays with the process for reuse (module docstring); yields whether
    the setting took effect. `enabled=False` runs the block unchanged (the side of an A/B measurement)."""
    global _depth
    libc = _LIBC
    if not enabled or libc is None:
        yield False
        return
    with _lock:
        ok = _depth > 0 or (libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, NEVER_TRIM) == 1)
        _depth += 1
    try:
        yield ok
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                libc.mallopt(M_MMAP_MAX, DEFAULT_MMAP_MAX)
                libc.mallopt(M_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD)
                libc.malloc_trim(0)
