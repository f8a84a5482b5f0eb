"""Token store and batches: round trips through TokenWriter/TokenStore, and the batch invariants.

Most tests use a "position-coded" store whose token at global offset p is the id p itself, so a batch
can be checked against the file it came from: a pair (x, y) is a true next-token pair inside one email
exactly when y == x + 1 and both offsets lie in the same email.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqlab.data.batches import WindowSampler, eval_window_count, fixed_eval_batches, iter_eval_windows
from seqlab.data.store import TokenStore, TokenWriter, load_meta, token_dtype
from seqlab.data.streams import StreamSampler, iter_eval_streams
from seqlab.errors import UserError

# Lengths with emails of 1 and 2 tokens, emails shorter than a window (T = 8) and several windows long.
LENGTHS = [1, 2, 5, 40, 3, 9, 8, 2, 17, 1, 64, 7, 30]
T = 8


def write_store(root: Path, lengths: list[int], vocab_size: int, rng: np.random.Generator | None = None,
                split: str = "train") -> list[np.ndarray]:
    """Write emails of the given lengths (random ids, or position-coded when rng is None) plus meta.json."""
    emails, offset = [], 0
    with TokenWriter(root, split, vocab_size) as w:
        for n in lengths:
            ids = rng.integers(0, vocab_size, size=n) if rng is not None else np.arange(offset, offset + n)
            assert w.add(ids) == offset
            emails.append(np.asarray(ids))
            offset += n
    (root / "meta.json").write_text(json.dumps({"token_dtype": str(token_dtype(vocab_size))}))
    return emails


def coded_store(root: Path, lengths: list[int]) -> tuple[TokenStore, int]:
    """A position-coded store and a pad id that is no token of it."""
    n = sum(lengths)
    write_store(root, lengths, vocab_size=n + 16)
    return TokenStore(root, "train"), n + 7


def email_of(store: TokenStore) -> np.ndarray:
    """Email index of every global token offset."""
    return np.repeat(np.arange(store.num_emails), store.lengths)


def target_positions(store: TokenStore) -> np.ndarray:
    """Every offset that is a target: all tokens except the first of each email."""
    keep = np.ones(store.num_tokens, dtype=bool)
    keep[store.starts] = False
    return np.flatnonzero(keep)


def check_pairs(store: TokenStore, x: torch.Tensor, y: torch.Tensor, pad: int) -> None:
    """Every kept target is the next token of its input inside one email; padding is ignored."""
    x, y = x.numpy(), y.numpy()
    assert x.dtype == np.int64 and y.dtype == np.int64
    real = x != pad
    assert np.all(y[~real] == -1)  # padding never carries a target
    kept = y != -1
    assert np.all(y[kept] == x[kept] + 1)  # y is x shifted by one token
    owner = email_of(store)
    assert np.all(owner[x[kept]] == owner[y[kept]])  # never across an email boundary


# ---------------------------------------------------------------- writer and reader


def test_token_dtype_threshold() -> None:
    assert token_dtype(259) == np.uint16
    assert token_dtype(65536) == np.uint16  # ids 0..65535 all fit
    assert token_dtype(65537) == np.uint32
    with pytest.raises(ValueError):
        token_dtype(0)


@pytest.mark.parametrize("vocab_size, dtype", [(259, np.uint16), (100_000, np.uint32)])
def test_round_trip(tmp_path: Path, vocab_size: int, dtype: type) -> None:
    rng = np.random.default_rng(0)
    emails = [rng.integers(0, vocab_size, size=n) for n in LENGTHS]
    emails[3][0] = vocab_size - 1  # the largest id survives the narrow dtype
    write_store(tmp_path, [2, 1], vocab_size, rng)  # another split beside it is left alone
    with TokenWriter(tmp_path, "val", vocab_size) as w:
        offsets = [w.add(e.tolist() if len(e) % 2 else e) for e in emails]  # lists and arrays alike
    store = TokenStore(tmp_path, "val")
    assert store.tokens.dtype == dtype and not store.tokens.flags.writeable
    assert store.num_emails == len(LENGTHS) and store.num_tokens == sum(LENGTHS)
    assert (tmp_path / "val.bin").stat().st_size == sum(LENGTHS) * np.dtype(dtype).itemsize
    assert np.array_equal(np.fromfile(tmp_path / "val.idx", dtype="<i8"), np.cumsum([0] + LENGTHS[:-1]))
    assert np.array_equal(store.starts, offsets) and TokenStore(tmp_path, "train").num_tokens == 3
    assert np.array_equal(store.ends - store.starts, LENGTHS)
    for i, e in enumerate(emails):
        assert np.array_equal(store.email(i), e)
    assert np.array_equal(store.email(-1), emails[-1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.json", "train.bin", "train.idx", "val.bin", "val.idx"]


def test_writer_failure_keeps_previous_store(tmp_path: Path) -> None:
    write_store(tmp_path, [3, 4], 259, np.random.default_rng(1))
    before = (tmp_path / "train.bin").read_bytes(), (tmp_path / "train.idx").read_bytes()
    with pytest.raises(RuntimeError):
        with TokenWriter(tmp_path, "train", 259) as w:
            w.add([1, 2, 3, 4, 5, 6])
            raise RuntimeError("prepare failed half way")
    assert ((tmp_path / "train.bin").read_bytes(), (tmp_path / "train.idx").read_bytes()) == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_writer_rejects_bad_emails(tmp_path: Path) -> None:
    with TokenWriter(tmp_path, "train", 259) as w:
        for bad in ([], [259], [-1], [[1, 2]], [0.5]):
            with pytest.raises(ValueError):
                w.add(bad)
        assert w.add([258]) == 0 and w.num_emails == 1
    with pytest.raises(ValueError):
        w.add([1])


def test_store_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="meta.json"):
        load_meta(tmp_path)
    with pytest.raises(UserError, match="train.bin"):
        TokenStore(tmp_path, "train")
    write_store(tmp_path, [3, 4, 5], 100_000, np.random.default_rng(2))
    # without token_dtype the vocabulary size recorded by prepare decides the width
    (tmp_path / "meta.json").write_text(json.dumps({"tokenizer": {"kind": "bpe", "vocab_size": 100_000}}))
    assert TokenStore(tmp_path, "train").tokens.dtype == np.uint32
    (tmp_path / "meta.json").write_text("{not json")
    with pytest.raises(UserError):
        TokenStore(tmp_path, "train")
    (tmp_path / "meta.json").write_text(json.dumps({"token_dtype": "uint32"}))
    np.array([0, 5, 4], dtype="<i8").tofile(tmp_path / "train.idx")  # offsets out of order
    with pytest.raises(UserError, match="train.idx"):
        TokenStore(tmp_path, "train")
    np.array([0, 3, 7], dtype="<i8").tofile(tmp_path / "train.idx")
    with open(tmp_path / "train.bin", "ab") as f:
        f.write(b"\x00")  # half a token
    with pytest.raises(UserError, match="truncated"):
        TokenStore(tmp_path, "train")


def test_empty_split(tmp_path: Path) -> None:
    write_store(tmp_path, [], 259)
    store = TokenStore(tmp_path, "train")
    assert store.num_emails == 0 and store.num_tokens == 0
    assert list(iter_eval_windows(store, T, 4, 258)) == [] and eval_window_count(store, T) == 0
    assert fixed_eval_batches(store, T, 4, 3, 0, 258) == []
    assert list(iter_eval_streams(store, T, 4, 258)) == []
    with pytest.raises(UserError):
        WindowSampler(store, T, 4, 0, 258)
    with pytest.raises(UserError):
        StreamSampler(store, T, 4, 0, 258)


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
        assert np.all(y.numpy()[long_rows] != -1)  # a window of a long email lies wholly inside it
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
        kept = y.numpy()[y.numpy() != -1]
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
    return np.concatenate([y.numpy()[y.numpy() != -1] for _, y in batches])


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


def test_fixed_eval_batches_repeat_and_are_distinct(tmp_path: Path) -> None:
    store, pad = coded_store(tmp_path, LENGTHS)
    first = fixed_eval_batches(store, T, 4, 3, seed=5, pad_id=pad)
    second = fixed_eval_batches(store, T, 4, 3, seed=5, pad_id=pad)
    assert len(first) == 3 and all(len(x) == 4 for x, _ in first)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(first, second))
    rows = np.concatenate([x.numpy() for x, _ in first])
    assert len({r.tobytes() for r in rows}) == len(rows)  # no window twice
    everything = fixed_eval_batches(store, T, 4, 1000, seed=5, pad_id=pad)
    assert np.array_equal(np.sort(eval_targets(everything)), target_positions(store))


# ---------------------------------------------------------------- streams


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
        assert np.array_equal(np.sort(y[y != -1]), target_positions(store))
        assert np.all(y[np.isin(x, store.ends - 1)] == -1)
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
            assert np.all(row_y[n:] == -1) and np.all(row_x[n + 1:] == pad)
        targets.append(y[y != -1])
    got = np.concatenate(targets)
    assert len(got) == store.num_tokens - store.num_emails
    assert np.array_equal(np.sort(got), target_positions(store))


# ---------------------------------------------------------------- properties over random corpora


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=15), block_size=st.integers(1, 12),
       batch_size=st.integers(1, 5), seed=st.integers(0, 2**31), stride_frac=st.floats(0.0, 1.0))
def test_properties_over_random_corpora(lengths: list[int], block_size: int, batch_size: int, seed: int,
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
                    cols = (y[torch.from_numpy(~starts_email)] != -1).nonzero()[:, 1]
                    assert bool((cols >= block_size - s).all())

        stream = StreamSampler(store, block_size, batch_size, seed, pad)
        x, y, reset = lane_reads(stream, epoch=1)
        check_pairs(store, torch.from_numpy(x), torch.from_numpy(y), pad)
        assert np.array_equal(np.sort(y[y != -1]), target_positions(store))
        assert np.all(reset[np.isin(x, store.starts)]) and np.all(reset[x == pad])

        if n_targets:
            windows = WindowSampler(store, block_size, batch_size, seed, pad)
            for step in range(3):
                check_pairs(store, *windows.batch(step), pad)
