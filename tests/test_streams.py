"""Stream batches (recurrent models): training lanes that replay each epoch's stream, held-out lanes
that read whole emails, and properties over random corpora. Stores come from `token_stores`."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from eval_reference import iter_eval_streams
from hypothesis import given, settings
from hypothesis import strategies as st
from token_stores import LENGTHS, T, check_pairs, coded_store, target_positions

from seqlab.data.batches import IGNORE_INDEX
from seqlab.data.streams import StreamSampler


def lane_reads(sampler: StreamSampler, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, y, reset) of every lane over one epoch, chunks concatenated: each (B, steps * T)."""
    spe = sampler.steps_per_epoch
    parts = [sampler.batch(epoch * spe + k) for k in range(spe)]
    return tuple(np.concatenate([p[i].numpy() for p in parts], axis=1) for i in range(3))


@pytest.mark.parametrize("batch_size", [1, 3, 7])
def test_stream_lanes_replay_the_epoch_stream(tmp_path: Path, batch_size: int) -> None:
    store, pad = coded_store(tmp_path, LENGTHS)
    sampler = StreamSampler(store, T, batch_size, seed=4, pad_id=pad)
    for epoch in (0, 1):
        order = sampler.epoch_order(epoch)
        assert sorted(order.tolist()) == list(range(store.num_emails))
        stream = np.concatenate([np.arange(store.starts[e], store.ends[e]) for e in order])
        x, y, reset = lane_reads(sampler, epoch)
        is_start = np.isin(x, store.starts)
        for b in range(batch_size):
            lo, hi = sampler.lane_start[b], sampler.lane_end[b]
            real = x[b] != pad
            assert np.array_equal(x[b][real], stream[lo:hi])  # chunks continue one another exactly
            assert np.all(~real[hi - lo:]) and np.all(real[:hi - lo])
            lane_first = np.zeros_like(real)
            lane_first[0] = True
            assert np.array_equal(reset[b], ~real | is_start[b] | lane_first)
        check_pairs(store, torch.from_numpy(x), torch.from_numpy(y), pad)
        # every target once per epoch, the eos of each email has none
        assert np.array_equal(np.sort(y[y != IGNORE_INDEX]), target_positions(store))
        assert np.all(y[np.isin(x, store.ends - 1)] == IGNORE_INDEX)
    assert not np.array_equal(sampler.epoch_order(0), sampler.epoch_order(1))


def test_stream_is_a_pure_function_of_step(tmp_path: Path) -> None:
    store, pad = coded_store(tmp_path, LENGTHS)
    a, b = StreamSampler(store, T, 3, 9, pad), StreamSampler(store, T, 3, 9, pad)
    spe = a.steps_per_epoch
    steps = [0, 1, spe - 1, spe, 3 * spe + 2]
    late = {s: b.batch(s) for s in reversed(steps)}
    for s in steps:
        assert all(torch.equal(u, v) for u, v in zip(a.batch(s), late[s]))
    assert a.position(spe + 1) == (1, 1)
    assert not torch.equal(a.batch(0)[0], a.batch(spe)[0])  # a new epoch, a new order
    x, y, reset = a.batch(0)
    assert x.dtype == y.dtype == torch.int64 and reset.dtype == torch.bool and x.shape == (3, T)
    with pytest.raises(ValueError):
        a.batch(-1)


def test_eval_streams_read_whole_emails_as_lanes(tmp_path: Path) -> None:
    store, pad = coded_store(tmp_path, LENGTHS)
    batches = list(iter_eval_streams(store, T, 4, pad))
    targets = []
    # regroup the chunks of each batch (a run starting with first=True) into whole lanes
    groups: list[list[tuple[torch.Tensor, torch.Tensor]]] = []
    for first, x, y in batches:
        if first:
            groups.append([])
        groups[-1].append((x, y))
        check_pairs(store, x, y, pad)
        assert x.shape == y.shape and x.shape[1] <= T and x.shape[0] <= 4
    for chunks in groups:
        x = np.concatenate([c[0].numpy() for c in chunks], axis=1)  # (B, longest email's targets)
        y = np.concatenate([c[1].numpy() for c in chunks], axis=1)
        for row_x, row_y in zip(x, y):
            e = int(np.searchsorted(store.starts, row_x[0], side="right") - 1)
            n = int(store.lengths[e]) - 1  # targets of that email
            assert row_x[0] == store.starts[e]  # a lane starts at its email's first token
            assert np.array_equal(row_y[:n], np.arange(store.starts[e] + 1, store.ends[e]))
            assert np.array_equal(row_x[:n], np.arange(store.starts[e], store.ends[e] - 1))
            assert np.all(row_y[n:] == IGNORE_INDEX) and np.all(row_x[n + 1:] == pad)
        targets.append(y[y != IGNORE_INDEX])
    got = np.concatenate(targets)
    assert len(got) == store.num_tokens - store.num_emails
    assert np.array_equal(np.sort(got), target_positions(store))


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=15), block_size=st.integers(1, 12),
       batch_size=st.integers(1, 5), seed=st.integers(0, 2**31))
def test_stream_properties_over_random_corpora(lengths: list[int], block_size: int, batch_size: int,
                                               seed: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store, pad = coded_store(Path(tmp), lengths)
        stream = StreamSampler(store, block_size, batch_size, seed, pad)
        x, y, reset = lane_reads(stream, epoch=1)
        check_pairs(store, torch.from_numpy(x), torch.from_numpy(y), pad)
        assert np.array_equal(np.sort(y[y != IGNORE_INDEX]), target_positions(store))
        assert np.all(reset[np.isin(x, store.starts)]) and np.all(reset[x == pad])
        scored = [np.zeros(0, dtype=np.int64)]
        for _, xh, yh in iter_eval_streams(store, block_size, batch_size, pad):  # held-out lanes
            check_pairs(store, xh, yh, pad)
            scored.append(yh.numpy()[yh.numpy() != IGNORE_INDEX])
        assert np.array_equal(np.sort(np.concatenate(scored)), target_positions(store))
