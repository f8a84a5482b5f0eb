"""The contexts fed beside the token batches (data/context_batches.py, training/context_feed.py): every
window and every stream position reads the context of its own email; training uses them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from seqlab.config import apply_overrides, get_preset
from seqlab.data.batches import WindowSampler
from seqlab.data.reply_batches import stream_contexts, window_contexts
from seqlab.data.store import TokenStore
from seqlab.data.streams import StreamSampler
from seqlab.errors import UserError
from seqlab.training.trainer import train


def _email_of(store: TokenStore, offset: int) -> int:
    return int(np.searchsorted(store.starts, offset, side="right") - 1)


def _expected(store: TokenStore, email: int, limit: int) -> list[int]:
    assert store.contexts is not None
    return store.contexts.context(email, limit).tolist()


def _row(ids: torch.Tensor, keep: torch.Tensor) -> list[int]:
    return ids[keep].tolist()


def test_windows_read_their_emails_context(tiny_data_dir: Path) -> None:
    """Windows that start mid-email too: the window's tokens are found inside the email whose context it gets."""
    store = TokenStore(tiny_data_dir, "train")
    sampler = WindowSampler(store, 16, 32, seed=3, pad_id=0)
    for step in range(5):
        x, _ = sampler.batch(step)
        starts = sampler.window_starts(step)
        rows = window_contexts(store, starts, limit=40)
        assert rows.ids.shape[:2] == (32, 1) and rows.segment is None
        for b, start in enumerate(starts):
            e = _email_of(store, int(start))
            assert store.starts[e] <= start < store.ends[e]
            assert x[b, 0].item() == store.tokens[start]
            assert _row(rows.ids[b, 0], rows.keep[b, 0]) == _expected(store, e, 40)
    mid = [s for step in range(5) for s in sampler.window_starts(step) if s not in set(store.starts)]
    assert mid  # some windows start inside an email


def test_stream_positions_read_their_emails_context(tiny_data_dir: Path) -> None:
    store = TokenStore(tiny_data_dir, "train")
    sampler = StreamSampler(store, 24, 4, seed=1, pad_id=0)
    order = {}
    for step in range(sampler.steps_per_epoch + 2):
        x, _, reset = sampler.batch(step)
        rows = stream_contexts(sampler, step, limit=30)
        assert rows.segment is not None and rows.segment.shape == x.shape
        epoch, chunk = sampler.position(step)
        if epoch not in order:
            order[epoch] = sampler.epoch_order(epoch)
        cum = np.concatenate([[0], np.cumsum(store.lengths[order[epoch]])])
        for b in range(x.size(0)):
            for t in range(x.size(1)):
                q = sampler.lane_start[b] + chunk * 24 + t
                seg = int(rows.segment[b, t])
                if q >= sampler.lane_end[b]:
                    assert seg == -1
                    continue
                email = order[epoch][np.searchsorted(cum, q, side="right") - 1]
                assert _row(rows.ids[b, seg], rows.keep[b, seg]) == _expected(store, int(email), 30)


def test_each_rank_reads_the_contexts_of_its_own_rows(tiny_data_dir: Path) -> None:
    """Data-parallel shards (training/distributed.py): a rank's windows and stream positions get the contexts
    the same rows get unsharded (found merging: stream contexts were once computed over every rank's lanes)."""
    store = TokenStore(tiny_data_dir, "train")
    whole_w = WindowSampler(store, 16, 4, seed=3, pad_id=0)
    whole_s = StreamSampler(store, 24, 4, seed=1, pad_id=0)
    for rank in range(2):
        rows = slice(2 * rank, 2 * rank + 2)  # shard_rows: a contiguous block of the global batch
        part_w = WindowSampler(store, 16, 4, seed=3, pad_id=0, shard=(rank, 2))
        part_s = StreamSampler(store, 24, 4, seed=1, pad_id=0, shard=(rank, 2))
        for step in range(whole_s.steps_per_epoch + 2):
            assert np.array_equal(part_w.window_starts(step), whole_w.window_starts(step)[rows])
            mine, all_ = stream_contexts(part_s, step, limit=30), stream_contexts(whole_s, step, limit=30)
            assert mine.segment is not None and all_.segment is not None
            assert torch.equal(mine.segment, all_.segment[rows])  # each row counts its own emails
            for b in range(2):
                for t in range(mine.segment.shape[1]):
                    seg, ref = int(mine.segment[b, t]), int(all_.segment[2 * rank + b, t])
                    if seg >= 0:
                        assert _row(mine.ids[b, seg], mine.keep[b, seg]) == \
                            _row(all_.ids[2 * rank + b, ref], all_.keep[2 * rank + b, ref])


def test_training_with_context(tiny_data_dir: Path, tmp_path: Path) -> None:
    for mixer in ("attention", "gru"):
        cfg = apply_overrides(get_preset("tiny"), [f"model.mixer={mixer}", "model.context=cross",
                                                   "model.ctx_block_size=48", "train.max_steps=4",
                                                   "train.eval_every=2", "train.threads=1"])
        summary = train(tiny_data_dir, tmp_path / mixer, cfg, progress=False)
        assert summary["steps"] == 4 and not summary["failed"]
        last = json.loads((tmp_path / mixer / "metrics.jsonl").read_text().splitlines()[-1])
        assert np.isfinite(last["val_loss"])


def test_context_model_needs_contexts(tiny_data_dir: Path, tmp_path: Path) -> None:
    old = tmp_path / "old"
    old.mkdir()
    for p in tiny_data_dir.iterdir():
        if ".ctx." not in p.name:
            (old / p.name).write_bytes(p.read_bytes())
    cfg = apply_overrides(get_preset("tiny"), ["model.context=cross", "train.max_steps=1"])
    with pytest.raises(UserError, match="prepare"):
        train(old, tmp_path / "run", cfg, progress=False)
    plain = apply_overrides(get_preset("tiny"), ["train.max_steps=1", "train.threads=1"])
    assert train(old, tmp_path / "plain", plain, progress=False)["steps"] == 1  # an old folder still trains


def test_resume_with_context_is_exact(tiny_data_dir: Path, tmp_path: Path) -> None:
    """A GRU reading contexts on streams (the carried state drops the cached context keys) resumes exactly."""
    from safetensors.torch import load_file

    over = ["model.mixer=gru", "model.pos=none", "model.context=cross", "model.ctx_block_size=32",
            "train.ckpt_every=3", "train.eval_every=3", "train.threads=1"]
    ref, run = tmp_path / "ref", tmp_path / "run"
    train(tiny_data_dir, ref, apply_overrides(get_preset("tiny"), [*over, "train.max_steps=6"]), progress=False)
    train(tiny_data_dir, run, apply_overrides(get_preset("tiny"), [*over, "train.max_steps=3"]), progress=False)
    train(tiny_data_dir, run, None, resume=True, overrides=["train.max_steps=6"], progress=False)
    a, b = load_file(str(ref / "model.safetensors")), load_file(str(run / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
