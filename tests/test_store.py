"""The token store: round trips through TokenWriter/TokenStore, atomic writes, user errors, empty splits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from eval_reference import iter_eval_streams, iter_eval_windows
from token_stores import LENGTHS, T, eval_window_count, write_store

from seqlab.data.batches import WindowSampler
from seqlab.data.prepare.token_files import TokenWriter
from seqlab.data.store import TokenStore, load_meta, token_dtype
from seqlab.data.streams import StreamSampler
from seqlab.errors import UserError
from seqlab.evaluation.plans import sample_emails


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
    assert len(sample_emails(store, 100, seed=0)) == 0  # the trainer's validation sample
    assert list(iter_eval_streams(store, T, 4, 258)) == []
    with pytest.raises(UserError):
        WindowSampler(store, T, 4, 0, 258)
    with pytest.raises(UserError):
        StreamSampler(store, T, 4, 0, 258)
