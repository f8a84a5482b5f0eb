"""The trainer's allocator setting (seqlab/training/cpu_allocator.py), seen from the process's resident memory:
inside the block a freed 64 MiB tensor stays with the process; outside, and after the block, it goes back."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from seqlab.training import cpu_allocator
from seqlab.training.cpu_allocator import keep_freed_memory

pytestmark = pytest.mark.skipif(not cpu_allocator.applies(), reason="the setting exists only under glibc")

MIB = 1 << 20
BLOCK = 64 * MIB  # above glibc's largest mmap threshold (32 MiB): by default its own mapping


def resident() -> int:
    """Bytes of this process in RAM (/proc/self/statm, second field, in pages)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def allocate_and_free() -> int:
    """Resident bytes gained by allocating, touching and freeing a BLOCK-sized tensor."""
    before = resident()
    t = torch.ones(BLOCK // 4)  # float32, every page written
    del t
    return resident() - before


def test_by_default_a_freed_large_tensor_leaves_the_process() -> None:
    assert allocate_and_free() < 8 * MIB


def test_inside_the_block_freed_memory_stays_and_leaving_gives_it_back() -> None:
    with keep_freed_memory() as ok:
        assert ok
        kept = allocate_and_free()
        assert kept > BLOCK - 8 * MIB
        allocate_and_free()  # the heap may grow once more: the new block can miss the freed one by its padding
        again = allocate_and_free()  # then the freed pages are reused: nothing new to map
        assert again < 8 * MIB
        inside = resident()
    assert resident() < inside - (BLOCK - 8 * MIB)  # trimmed on leaving
    assert allocate_and_free() < 8 * MIB  # glibc's defaults again


def test_only_the_outermost_block_restores_and_disabled_changes_nothing() -> None:
    with keep_freed_memory(enabled=False) as ok:
        assert not ok
        assert allocate_and_free() < 8 * MIB
    with keep_freed_memory():
        with keep_freed_memory():
            pass
        assert allocate_and_free() > BLOCK - 8 * MIB  # the inner block's exit did not restore
