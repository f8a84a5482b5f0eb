"""Window batches (attention models): training windows inside emails, evaluation windows that score
every target once, and properties over random corpora. Stores come from `token_stores`."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from eval_reference import iter_eval_windows
from hypothesis import given, settings
from hypothesis import strategies as st
from token_stores import LENGTHS, T, check_pairs, coded_store, email_of, eval_window_count, target_positions

from seqlab.data.batches import (
    IGNORE_INDEX,
    WindowSampler,
)

# ---------------------------------------------------------------- training windows


def test_windows_stay_inside_emails(tmp_path: Path) -> None:
    store, pad = coded_store(tmp_path, LENGTHS)
    sampler = WindowSampler(store, T, 16, seed=3, pad_id=pad)
    starts = set(store.starts.tolist())
    for step in range(50):
        x, y = sampler.batch(step)
        assert x.shape == y.shape == (16, T)
        check_pairs(store, x, y, pad)
        xa = x.numpy()
        padded = xa[:, -1] == pad
        # padding only at the tail, and only for an email shorter than a window read from its start
        assert np.all(np.diff((xa == pad).astype(int), axis=1) >= 0)
        assert all(int(r[0]) in starts for r in xa[padded])
        long_rows = store.lengths[email_of(store)[xa[:, 0]]] > T
        assert np.all(y.numpy()[long_rows] != IGNORE_INDEX)  # a window of a long email lies wholly inside it
        assert not np.isin(xa[:, 0], store.starts[store.lengths == 1]).any()  # 1-token emails have no target


def test_windows_are_a_pure_function_of_seed_and_step(tmp_path: Path) -> None:
    store, pad = coded_store(tmp_path, LENGTHS)
    a, b = WindowSampler(store, T, 8, 11, pad), WindowSampler(store, T, 8, 11, pad)
    later = [b.batch(s) for s in (9, 5, 2)]  # another instance, another order of calls
    for (xb, yb), s in zip(later, (9, 5, 2)):
        xa, ya = a.batch(s)
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not torch.equal(a.batch(5)[0], a.batch(6)[0])
    assert not torch.equal(a.batch(5)[0], WindowSampler(store, T, 8, 12, pad).batch(5)[0])


def test_windows_weight_emails_by_length_and_reach_every_target(tmp_path: Path) -> None:
    lengths = [3, 400, 3, 40]
    store, pad = coded_store(tmp_path, lengths)
    sampler = WindowSampler(store, T, 64, seed=0, pad_id=pad)
    owner, hits = email_of(store), np.zeros(store.num_tokens, dtype=int)
    draws = np.zeros(len(lengths))
    for step in range(200):
        x, y = sampler.batch(step)
        draws += np.bincount(owner[x[:, 0].numpy()], minlength=len(lengths))
        kept = y.numpy()[y.numpy() != IGNORE_INDEX]
        hits[kept] += 1
    slots = np.array(lengths) + T - 2  # placements per email (min_window_tokens = 2)
    expected = draws.sum() * slots / slots.sum()
    assert np.all(np.abs(draws - expected) < 5 * np.sqrt(expected) + 1)
    assert np.all(hits[target_positions(store)] > 0)
    # first and last targets of the long email are covered at least as often as its middle, on average
    long = slice(store.starts[1] + 1, store.ends[1])
    mid = hits[long][T:-T].mean()
    assert hits[long][:T].mean() > 0.8 * mid and hits[long][-T:].mean() > 0.8 * mid


def test_min_window_tokens_skips_tiny_emails(tmp_path: Path) -> None:
    store, pad = coded_store(tmp_path, LENGTHS)
    sampler = WindowSampler(store, T, 32, 0, pad, min_window_tokens=4)
    owner = email_of(store)
    for step in range(20):
        x, _ = sampler.batch(step)
        assert np.all(store.lengths[owner[x[:, 0].numpy()]] >= 4)
    with pytest.raises(ValueError):
        WindowSampler(store, T, 32, 0, pad, min_window_tokens=T + 2)


# ---------------------------------------------------------------- evaluation windows


def eval_targets(batches: list[tuple[torch.Tensor, torch.Tensor]]) -> np.ndarray:
    return np.concatenate([y.numpy()[y.numpy() != IGNORE_INDEX] for _, y in batches])


def test_eval_windows_cover_every_target_once(tmp_path: Path) -> None:
    store, pad = coded_store(tmp_path, LENGTHS)
    batches = list(iter_eval_windows(store, T, 5, pad))
    for x, y in batches:
        check_pairs(store, x, y, pad)
    got = eval_targets(batches)
    assert len(got) == store.num_tokens - store.num_emails
    assert np.array_equal(np.sort(got), target_positions(store))
    assert sum(len(x) for x, _ in batches) == eval_window_count(store, T)
    again = list(iter_eval_windows(store, T, 5, pad))
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(batches, again))
    # the last window of a long email is read in full so its targets keep their context
    last_of_64 = np.concatenate([x.numpy() for x, _ in batches])
    assert any(row[-1] == store.ends[10] - 2 and row[0] == store.ends[10] - 1 - T for row in last_of_64)


# ---------------------------------------------------------------- properties over random corpora


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=15), block_size=st.integers(1, 12),
       batch_size=st.integers(1, 5), seed=st.integers(0, 2**31), stride_frac=st.floats(0.0, 1.0))
def test_window_properties_over_random_corpora(lengths: list[int], block_size: int, batch_size: int, seed: int,
                                               stride_frac: float) -> None:
    stride = max(1, round(stride_frac * block_size))
    with tempfile.TemporaryDirectory() as tmp:
        store, pad = coded_store(Path(tmp), lengths)
        n_targets = store.num_tokens - store.num_emails
        for s in (None, stride):  # side by side, and overlapping windows
            batches = list(iter_eval_windows(store, block_size, batch_size, pad, stride=s))
            for x, y in batches:
                check_pairs(store, x, y, pad)
            got = eval_targets(batches) if batches else np.zeros(0, dtype=np.int64)
            assert np.array_equal(np.sort(got), target_positions(store)) and len(got) == n_targets
            assert sum(len(x) for x, _ in batches) == eval_window_count(store, block_size, stride=s)
            if s is not None:  # a window that does not start its email scores only targets with context
                for x, y in batches:
                    first = x[:, 0].numpy()  # tokens are coded with their global position
                    starts_email = np.isin(first, store.starts)
                    cols = (y[torch.from_numpy(~starts_email)] != IGNORE_INDEX).nonzero()[:, 1]
                    assert bool((cols >= block_size - s).all())

        if n_targets:
            windows = WindowSampler(store, block_size, batch_size, seed, pad)
            for step in range(3):
                check_pairs(store, *windows.batch(step), pad)
