"""The trainer's allocator setting (seqlab/training/cpu_allocator.py), seen from the process's resident memory:
inside the block a freed 64 MiB block stays with the process and the next one of its size reuses it; outside
it goes back to the kernel, and leaving the block hands back what it kept.

Each case runs in a fresh interpreter: a test process that trained a model earlier has large free blocks
in its heap already, which a new block reuses, so glibc's default behaviour cannot be seen there."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from seqlab.training import cpu_allocator
from seqlab.training.cpu_allocator import keep_freed_memory

pytestmark = pytest.mark.skipif(not cpu_allocator.applies(), reason="the setting exists only under glibc")

MIB = 1 << 20
BLOCK = 64 * MIB  # above glibc's largest mmap threshold (32 MiB): by default its own mapping
SLACK = 8 * MIB  # what the interpreter itself may map or free meanwhile

LIBC = ctypes.CDLL(None)
LIBC.malloc.restype = ctypes.c_void_p
LIBC.malloc.argtypes = (ctypes.c_size_t,)
LIBC.free.argtypes = (ctypes.c_void_p,)


def resident() -> int:
    """Bytes of this process in RAM (/proc/self/statm, second field, in pages)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def malloc_and_free() -> tuple[int, int]:
    """(resident bytes gained by malloc'ing a BLOCK and writing every page, resident bytes lost by freeing it)."""
    before = resident()
    ptr = LIBC.malloc(BLOCK)
    assert ptr
    ctypes.memset(ptr, 1, BLOCK)
    peak = resident()
    LIBC.free(ptr)
    return peak - before, peak - resident()


def tensor_and_free() -> tuple[int, int]:
    """The same through a float32 tensor (torch allocates aligned blocks through the same malloc)."""
    before = resident()
    t = torch.ones(BLOCK // 4)
    peak = resident()
    del t
    return peak - before, peak - resident()


def by_default_a_freed_large_block_leaves_the_process() -> None:
    assert malloc_and_free()[1] > BLOCK - SLACK
    assert tensor_and_free()[1] > BLOCK - SLACK


def inside_the_block_freed_memory_stays_is_reused_and_goes_back_on_leaving() -> None:
    with keep_freed_memory() as ok:
        assert ok
        assert malloc_and_free()[1] < SLACK  # freeing kept it
        assert malloc_and_free()[0] < SLACK  # the next block of its size is the freed one: nothing new to map
        assert tensor_and_free()[1] < SLACK  # a tensor's block is kept too
        inside = resident()
    assert resident() < inside - (BLOCK - SLACK)  # trimmed on leaving


def only_the_last_block_to_leave_restores_and_disabled_changes_nothing() -> None:
    with keep_freed_memory(enabled=False) as ok:
        assert not ok
        assert malloc_and_free()[1] > BLOCK - SLACK
    with keep_freed_memory():
        with keep_freed_memory():
            pass
        assert malloc_and_free()[1] < SLACK  # the inner block's exit did not restore
    opened, leave = threading.Event(), threading.Event()

    def other_thread() -> None:
        with keep_freed_memory():
            opened.set()
            leave.wait(60)

    worker = threading.Thread(target=other_thread)
    worker.start()
    opened.wait(60)
    with keep_freed_memory():
        pass  # left while the other thread's block is open: the setting stays
    assert malloc_and_free()[1] < SLACK
    leave.set()
    worker.join()
    assert malloc_and_free()[1] > BLOCK - SLACK  # the last block to leave restored


@pytest.mark.parametrize("case", [by_default_a_freed_large_block_leaves_the_process,
                                  inside_the_block_freed_memory_stays_is_reused_and_goes_back_on_leaving,
                                  only_the_last_block_to_leave_restores_and_disabled_changes_nothing],
                         ids=lambda f: f.__name__)
def test_in_a_fresh_interpreter(case: object) -> None:
    code = f"import test_cpu_allocator as t; t.{case.__name__}()"  # type: ignore[attr-defined]
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
