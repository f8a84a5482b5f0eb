"""Held-out plans (evaluation/plans.py): the sliding key/value cache against a recompute of exactly the
context each target may see, against the half-overlapping windows and a token-by-token pass where the
contexts are equal, reply contexts read through cross-attention, and recurrent lanes that do not depend
on how the split is cut."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from seqlab.config import ModelConfig
from seqlab.data.batches import IGNORE_INDEX
from seqlab.data.prepare.reply_files import ContextWriter
from seqlab.data.prepare.token_files import TokenWriter
from seqlab.data.reply_batches import gather_contexts
from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import ByteTokenizer
from seqlab.evaluation.context_scores import email_scores
from seqlab.evaluation.heldout import evaluate_lm, score_heldout, token_byte_lengths
from seqlab.evaluation.plans import iter_lanes, iter_windows, plan_kind, slide_chunk, split_plan
from seqlab.models import build_model
from seqlab.models.context_encoder import ContextBatch
from seqlab.models.kv_cache import SlidingKVCache
from seqlab.models.lm import LMState

CPU = torch.device("cpu")
TOK = ByteTokenizer()
W = 8  # the window of every model here; sliding chunks are W // 2 = 4 tokens
CTX = 6  # context tokens read per email


def make_store(path: Path, n_targets: list[int], contexts: list[int] | None = None, seed: int = 0) -> TokenStore:
    """A split of emails with the given target counts (random bytes), and contexts of the given lengths."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True)
    with TokenWriter(path, "val", TOK.vocab_size) as w:
        for n in n_targets:
            w.add(np.array([TOK.bos_id, *rng.integers(97, 123, n - 1), TOK.eos_id]))
    if contexts is not None:
        cw = ContextWriter(path, "val", TOK.vocab_size)
        for n in contexts:
            cw.add(rng.integers(97, 123, n))
        cw.close()
    (path / "meta.json").write_text(json.dumps({"token_dtype": "uint16", "vocab_size": TOK.vocab_size}))
    return TokenStore(path, "val")


def tiny_model(pos: str, mixer: str = "attention", cross: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=TOK.vocab_size, block_size=W, n_layer=2, n_embd=16, n_head=2, mlp_ratio=2,
                      mixer=mixer, pos=pos, context="cross" if cross else "none", ctx_block_size=CTX, ctx_layers=1)
    return build_model(cfg).double().eval()  # float64: the paths below differ only in summation order


def email_context(store: TokenStore, e: int) -> dict[str, ContextBatch]:
    """The context rows the plans give email e (its context's last CTX tokens; all padding for none)."""
    ids, keep = gather_contexts(store.contexts, np.array([[e]]), CTX)
    return {"context": ContextBatch(ids, keep)}


def full_nll(model: torch.nn.Module, store: TokenStore, e: int) -> float:
    """An email's summed NLL from one plain forward over the whole email."""
    toks = torch.from_numpy(store.email(e).astype(np.int64))[None]
    with torch.no_grad():
        logits, _ = model(toks[:, :-1])
    return float(F.cross_entropy(logits[0], toks[0, 1:], reduction="sum"))


def sliding_start(t: int) -> int:
    """The first input whose keys target t reads in the sliding plan: chunk b = t // C holds the W - C
    inputs before it."""
    c = slide_chunk(W)
    return max(0, (t // c) * c - (W - c))


def token_by_token_nll(model: torch.nn.Module, store: TokenStore, e: int, context: bool = False) -> float:
    """An email's summed NLL fed one token at a time, input t reading, at every layer, the keys and
    values of inputs sliding_start(t)..t-1 exactly as this pass computed them (no chunks, no masks, no
    lanes): the computation the sliding plan claims to do."""
    toks = torch.from_numpy(store.email(e).astype(np.int64))[None]
    n_layer = len(model.blocks)
    keys: list[list[torch.Tensor]] = [[] for _ in range(n_layer)]
    values: list[list[torch.Tensor]] = [[] for _ in range(n_layer)]
    extra = email_context(store, e) if context else {}
    total = 0.0
    with torch.no_grad():
        for t in range(toks.size(1) - 1):
            s = sliding_start(t)
            held = [SlidingKVCache(10**9, torch.cat(keys[i][s:t], 2) if t > s else None,
                                   torch.cat(values[i][s:t], 2) if t > s else None, t) for i in range(n_layer)]
            state = LMState(held, [None] * n_layer, torch.tensor([t]))
            logits, after = model(toks[:, t:t + 1], state=state, **extra)
            for i, cache in enumerate(after.layers):
                keys[i].append(cache.k[:, :, -1:])
                values[i].append(cache.v[:, :, -1:])
            total += float(F.cross_entropy(logits[0], toks[0, t + 1:t + 2]))
    return total


LENGTHS = [3, 30, 8, 17, 1, 9, 24]  # targets per email: shorter and longer than a window, one of one


@pytest.mark.parametrize("pos", ["none", "rope", "alibi"])
def test_sliding_cache_equals_a_token_by_token_pass(tmp_path: Path, pos: str) -> None:
    store = make_store(tmp_path / "d", LENGTHS)
    model = tiny_model(pos)
    assert plan_kind(model) == "sliding"
    # batch_size 1: 2 lanes of 4-token chunks, so several lane groups and lanes dropped as emails end
    scores = email_scores(model, store, W, 1, CPU, TOK)
    assert np.array_equal(scores.tokens, store.lengths - 1)
    for e in range(store.num_emails):
        assert scores.nll[e] == pytest.approx(token_by_token_nll(model, store, e), rel=1e-10)
    # the guarantee: a target's keys are its whole prefix or at least W - C inputs, and never more than W
    seen = [t + 1 - sliding_start(t) for t in range(40)]
    assert all(min(t + 1, W - slide_chunk(W)) <= s <= W for t, s in enumerate(seen))


@pytest.mark.parametrize("pos", ["none", "rope", "alibi"])
def test_sliding_equals_windows_and_token_by_token_where_contexts_are_equal(tmp_path: Path, pos: str) -> None:
    """Emails of at most W targets: one whole-email window, the sliding lanes and a token-by-token pass
    with the decoder's key/value cache all predict every target from its whole prefix."""
    store = make_store(tmp_path / "d", [W, 3, 5, 1, W, 7])
    model = tiny_model(pos)
    lengths = token_byte_lengths(TOK)
    n = store.num_emails
    sliding = email_scores(model, store, W, 2, CPU, TOK)
    windows = (np.zeros(n), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64))
    score_heldout(model, iter_windows(store, W, 3, TOK.pad_id, 0), lengths, CPU, per_email=windows)
    np.testing.assert_allclose(sliding.nll, windows[0], rtol=1e-10)
    assert np.array_equal(sliding.tokens, windows[1]) and np.array_equal(sliding.bytes, windows[2])
    with torch.no_grad():
        for e in range(n):
            toks = torch.from_numpy(store.email(e).astype(np.int64))[None]
            state, nll = None, 0.0
            for t in range(toks.size(1) - 1):
                logits, state = model(toks[:, t:t + 1], state=state)
                nll += float(F.cross_entropy(logits[0], toks[0, t + 1:t + 2]))
            assert sliding.nll[e] == pytest.approx(nll, rel=1e-10)


def test_sliding_reads_each_emails_reply_context(tmp_path: Path) -> None:
    store = make_store(tmp_path / "d", LENGTHS, contexts=[4, 0, 9, 2, 0, 5, 11])
    model = tiny_model("rope", cross=True)
    read = email_scores(model, store, W, 1, CPU, TOK)
    blind = email_scores(model, store, W, 1, CPU, TOK, use_context=False)
    for e in range(store.num_emails):
        assert read.nll[e] == pytest.approx(token_by_token_nll(model, store, e, context=True), rel=1e-10)
        assert blind.nll[e] == pytest.approx(token_by_token_nll(model, store, e), rel=1e-10)
    has = read.has_context
    np.testing.assert_allclose(read.nll[~has], blind.nll[~has], rtol=1e-10)  # no context: nothing read
    assert not np.allclose(read.nll[has], blind.nll[has], rtol=1e-6)
    # windows read the same contexts: equal to sliding on an email that fits one window
    short = make_store(tmp_path / "s", [5, W, 2], contexts=[3, 0, 7])
    n = short.num_emails
    windows = (np.zeros(n), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64))
    score_heldout(model, iter_windows(short, W, 2, TOK.pad_id, CTX), token_byte_lengths(TOK), CPU,
                  per_email=windows)
    np.testing.assert_allclose(email_scores(model, short, W, 2, CPU, TOK).nll, windows[0], rtol=1e-10)


@pytest.mark.parametrize("mixer,pos", [("gru", "none"), ("mingru", "none")])
def test_recurrent_lanes_do_not_depend_on_the_cut(tmp_path: Path, mixer: str, pos: str) -> None:
    store = make_store(tmp_path / "d", LENGTHS)
    model = tiny_model(pos, mixer)
    assert plan_kind(model) == "lanes"
    whole = [full_nll(model, store, e) for e in range(store.num_emails)]
    for block_size, batch_size in ((3, 1), (64, 1), (5, 7), (2, 40)):
        scores = email_scores(model, store, block_size, batch_size, CPU, TOK)
        np.testing.assert_allclose(scores.nll, whole, rtol=1e-10)
        assert np.array_equal(scores.tokens, store.lengths - 1)


@pytest.mark.parametrize("pos,kind", [("learned", "windows"), ("sinusoidal", "windows"), ("rope", "sliding")])
def test_absolute_positions_keep_the_windows(tmp_path: Path, pos: str, kind: str) -> None:
    """Keys that carry absolute positions cannot slide: those models keep the half-overlapping windows,
    and each path scores every target once and agrees with the per-email totals."""
    store = make_store(tmp_path / "d", LENGTHS)
    model = tiny_model(pos)
    assert plan_kind(model) == kind
    whole = evaluate_lm(model, store, W, 3, CPU, TOK)
    per_email = email_scores(model, store, W, 3, CPU, TOK)
    assert whole["tokens"] == int(per_email.tokens.sum()) == int((store.lengths - 1).sum())
    assert whole["nll_nats"] == pytest.approx(float(per_email.nll.sum()), rel=1e-10)


def test_lanes_drop_ended_emails_and_score_each_target_once(tmp_path: Path) -> None:
    store = make_store(tmp_path / "d", [1, 2, 2, 5, 9, 12, 30, 31])
    counted = np.zeros(store.num_emails, dtype=np.int64)
    rows, dropped = None, 0
    for c in iter_lanes(store, lanes=3, chunk=4, pad_id=TOK.pad_id, limit=0):
        scored = (c.y != IGNORE_INDEX).sum(1).numpy()
        assert scored.min() > 0  # no lane that has ended is computed again
        if c.first:
            assert c.carry is None
        elif c.carry is not None:
            dropped += rows - len(c.carry)
            assert c.carry.tolist() == list(range(rows - len(c.carry), rows))  # the longest lanes go on
        np.add.at(counted, c.emails, scored)
        rows = c.x.size(0)
    assert np.array_equal(counted, store.lengths - 1) and dropped > 0


def test_sliding_cache_holds_the_last_positions() -> None:
    cache = SlidingKVCache(keep=3)
    k = torch.arange(7.0).view(1, 1, 7, 1)
    first, _ = cache.append(k[:, :, :2], k[:, :, :2])
    assert first.flatten().tolist() == [0, 1] and cache.length == 2
    seen, _ = cache.append(k[:, :, 2:6], k[:, :, 2:6])
    assert seen.flatten().tolist() == [0, 1, 2, 3, 4, 5] and cache.k.flatten().tolist() == [3, 4, 5]
    seen, _ = cache.append(k[:, :, 6:], k[:, :, 6:])
    assert seen.flatten().tolist() == [3, 4, 5, 6] and cache.length == 7
    none = SlidingKVCache(keep=0)
    none.append(k[:, :, :2], k[:, :, :2])
    assert none.k.size(2) == 0


def test_a_call_holds_about_a_training_batch(tmp_path: Path) -> None:
    store = make_store(tmp_path / "d", [40] * 20)
    for pos, mixer in (("rope", "attention"), ("none", "gru"), ("learned", "attention")):
        plan = split_plan(tiny_model(pos, mixer), store, W, 4, TOK.pad_id)
        assert max(c.x.numel() for c in plan.chunks) <= 4 * W


def test_a_model_still_trains_after_sliding_past_its_window(tmp_path: Path) -> None:
    """Scoring emails longer than the RoPE table under inference_mode grows the table; it must stay a
    normal tensor, or the next training step cannot save it for backward."""
    store = make_store(tmp_path / "d", [3 * W, 5 * W])
    model = tiny_model("rope").float()
    evaluate_lm(model, store, W, 1, CPU, TOK)
    model.train()
    logits, _ = model(torch.randint(0, TOK.vocab_size, (2, W)))
    logits.sum().backward()
    assert model.wte.weight.grad is not None
