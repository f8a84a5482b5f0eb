"""The server's kept state: a suggestion from a reused session equals one computed from scratch."""

from __future__ import annotations

import pytest
import torch

from seqlab.config import ModelConfig
from seqlab.data.tokenizer import ByteTokenizer
from seqlab.models import build_model
from seqlab.serving.engine import CompletionEngine
from seqlab.serving.sessions import (
    RECURRENT_TAIL,
    SNAPSHOT_EVERY,
    PromptEncoder,
    SessionStore,
    common_prefix,
    held_bytes,
    window_start,
)

TOK = ByteTokenizer()
BLOCK = 24  # small, so a typed email soon outgrows an attention window


def _model(mixer: str, pos: str) -> torch.nn.Module:
    """A seeded model with sharpened logits: an untrained model's near-ties would make argmax fragile."""
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=TOK.vocab_size, block_size=BLOCK, mixer=mixer, n_layer=2, n_embd=32, n_head=2,
                      pos=pos, mlp_ratio=2)
    model = build_model(cfg).eval()
    with torch.no_grad():
        model.head.weight.mul_(8.0)  # tied with the embedding: larger logits, clear winners
    return model


# Keystrokes of one writer: typing, a backspace, a word replaced mid-text, typing past the window.
TYPED = "Hi Dana, could you send me the report before Friday? Thanks"
EDITS = [TYPED[:n] for n in range(1, len(TYPED) + 1)]
EDITS += [TYPED[:-1], TYPED[:-3] + "nk you", "Hi Jo, could you send me the report", "Hi Jo, could you send"]

FAMILIES = [("gru", "none"), ("rnn", "none"), ("mingru", "none"), ("attention", "rope"), ("attention", "alibi"),
            ("attention", "learned"), ("gru", "learned")]


@pytest.mark.parametrize("mixer,pos", FAMILIES)
def test_session_answers_equal_answers_from_scratch(mixer: str, pos: str) -> None:
    model = _model(mixer, pos)
    kept = CompletionEngine(model, TOK, threshold=0.0)
    fresh = CompletionEngine(model, TOK, threshold=0.0)
    reused = []
    for body in EDITS:
        a = kept.complete(body, "Report", session="writer", max_words=3)
        b = fresh.complete(body, "Report", session=None, max_words=3)
        assert a.text == b.text, f"{mixer}/{pos} after {body!r}"
        assert a.confidence == pytest.approx(b.confidence, rel=1e-4, abs=1e-6)
        assert (a.cut_chars, a.words) == (b.cut_chars, b.words)
        assert b.reused_tokens == 0
        reused.append(a.reused_tokens)
    # typing one more character reuses everything encoded before it (once past the first keystroke)
    assert sum(r > 0 for r in reused[1:len(TYPED)]) >= len(TYPED) // 2
    assert max(reused) >= 20


def test_beam_from_a_session_equals_beam_from_scratch() -> None:
    model = _model("attention", "rope")
    kept, fresh = CompletionEngine(model, TOK), CompletionEngine(model, TOK)
    for body in EDITS[::7]:
        a = kept.complete(body, "Re: lunch", session="w", beam=3)
        b = fresh.complete(body, "Re: lunch", beam=3)
        assert (a.text, a.words) == (b.text, b.words)
        assert a.confidence == pytest.approx(b.confidence, rel=1e-4, abs=1e-6)


def test_threshold_withholds_and_sessions_do_not_mix() -> None:
    model = _model("gru", "none")
    engine = CompletionEngine(model, TOK, threshold=0.0)
    a = engine.complete("Could you send me the", "", session="a")
    assert engine.complete("Could you send me the", "", session="a", min_confidence=1.0).text == ""
    b = engine.complete("Totally different text here", "", session="b")
    assert engine.complete("Could you send me the", "", session="a").text == a.text
    assert b.threshold == 0.0 and a.id != b.id


def test_window_start_is_a_function_of_length_and_moves_in_half_windows() -> None:
    assert [window_start(n, None) for n in (1, 500)] == [0, 0]
    assert [window_start(n, 8) for n in (8, 9, 12, 13, 16, 17)] == [0, 4, 4, 8, 8, 12]
    for n in range(1, 200):
        s = window_start(n, 24)
        assert 0 <= n - s <= 24 and (n <= 24 or n - s > 12) and s % 12 == 0


def test_encoder_feeds_only_new_tokens_and_keeps_recurrent_snapshots() -> None:
    model = _model("gru", "none")
    enc = PromptEncoder(model)
    ids = [TOK.bos_id, *TOK.encode("x" * 40)]
    first, reused = enc.encode(ids[:30])
    assert reused == 0 and sorted(first.snapshots) == [SNAPSHOT_EVERY]
    second, reused = enc.encode(ids, first)
    assert reused == 30 and sorted(second.snapshots) == [16, 32]
    back, reused = enc.encode(ids[:20], second)  # a backspace past the newest snapshot
    assert reused == 16
    full, _ = enc.encode(ids[:20])
    assert torch.allclose(back.logits, full.logits, atol=1e-5)
    # a long prompt runs in few calls: copies only over the newest DENSE_TAIL tokens, plus where it stopped
    long_ids = [TOK.bos_id, *TOK.encode("y" * 199)]
    long, _ = enc.encode(long_ids)
    assert sorted(long.snapshots) == [128, 144, 160, 176, 192]
    edited, reused = enc.encode(long_ids[:100] + [66] * 20, long)  # an edit far back: from the copy at 16*k
    assert reused == 0 or reused % SNAPSHOT_EVERY == 0
    assert torch.allclose(edited.logits, enc.encode(long_ids[:100] + [66] * 20)[0].logits, atol=1e-5)


def test_session_store_drops_the_least_recently_used() -> None:
    store = SessionStore(2)
    enc = PromptEncoder(_model("attention", "rope"))
    e, _ = enc.encode([TOK.bos_id, 65])
    store.put("a", e)
    store.put("b", e)
    assert store.get("a") is e  # a is now the most recent
    store.put("c", e)
    assert store.get("b") is None and store.get("a") is e and len(store) == 2


def test_a_long_prompt_is_fed_as_a_bounded_tail_and_keeps_little() -> None:
    """A 64 KiB body to a GRU, with no kept state: at most RECURRENT_TAIL tokens run through the model, and
    the session keeps its state, the logits and a few copies, not the model's (1, T, V) output."""
    model = _model("gru", "none")
    enc = PromptEncoder(model)
    ids = [TOK.bos_id, *TOK.encode("Dear all, the figures for May are attached. " * 1490)]  # 65,560 tokens
    encoded, _ = enc.encode(ids)
    assert len(encoded.ids) <= RECURRENT_TAIL and encoded.start == len(ids) - len(encoded.ids)
    # what a view of the last row would have kept alive: the whole output of the feed
    with torch.inference_mode():
        out, _ = model(torch.tensor([encoded.ids[:1024]]))
    assert held_bytes(out[:, -1]) == 1024 * TOK.vocab_size * 4
    assert len(encoded.snapshots) <= 64 // SNAPSHOT_EVERY + 1
    assert encoded.nbytes() < 32 * 1024, encoded.nbytes()  # state, logits and 5 copies: ~12 KB
    # a session typed out to 64 KiB keystroke by keystroke keeps as little
    store, previous = SessionStore(4), None
    for n in range(len(ids) - 300, len(ids) + 1, 7):
        previous, _ = enc.encode(ids[:n], previous)
        store.put("w", previous)
    assert store.bytes == previous.nbytes() < 32 * 1024


def test_session_store_is_bounded_in_bytes() -> None:
    enc = PromptEncoder(_model("gru", "none"))
    e, _ = enc.encode([TOK.bos_id, *TOK.encode("x" * 100)])
    store = SessionStore(1000, max_bytes=5 * e.nbytes())
    for i in range(20):
        store.put(f"s{i}", e)
    assert len(store) == 5 and store.bytes == 5 * e.nbytes() and store.get("s19") is e and store.get("s14") is None
    alone = SessionStore(10, max_bytes=1)  # one session larger than the cap is still kept, alone
    alone.put("a", e)
    alone.put("b", e)
    assert len(alone) == 1 and alone.get("b") is e


def test_common_prefix() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0
