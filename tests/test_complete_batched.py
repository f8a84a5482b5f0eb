"""`propose_positions` (prefix reuse and lanes, `seqlab.generation.batched`) against `complete` called once per
position, for every mixer family, with a BPE tokenizer (token healing: prompts that end in a space, inside a
word, after punctuation, after a newline) and the byte tokenizer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_fit import fit_sentences

from seqlab.config import ModelConfig
from seqlab.data.prepare.tokenizer_fit import fit_tokenizer
from seqlab.data.tokenizer import ByteTokenizer, Tokenizer
from seqlab.generation.batched import batchable, propose_positions
from seqlab.generation.complete import Completion, complete
from seqlab.generation.gate import FIRST_WORD
from seqlab.generation.phrases import PhraseModel
from seqlab.generation.prefix_lanes import stack_states
from seqlab.models import build_model
from seqlab.models.context_encoder import ContextBatch

TRAIN = ["could you send me the file, please? thanks.", "I will find the figures for you. See you soon!",
         "Meeting at noon\n\nsee you at the game, bye now"]
EMAILS = ["Files\n\ncould you send me the figures, please? I will find the file.\nThanks",
          "Hi\n\nsee you at noon. bye",
          "Re: game\n\nI will send you the file soon!  See you"]
FAMILIES = {"rnn": dict(mixer="rnn", pos="none"), "gru": dict(mixer="gru", pos="none"),
            "mingru": dict(mixer="mingru", pos="none"), "attention": dict(mixer="attention", pos="rope"),
            "gru-learned": dict(mixer="gru", pos="learned")}


@pytest.fixture(scope="module")
def bpe() -> Tokenizer:
    return fit_tokenizer("bpe", TRAIN * 20, vocab_size=300)


def _model(name: str, tok: Tokenizer, seed: int = 0, steps: int = 40) -> torch.nn.Module:
    """A tiny model of family `name`, fitted for a few Adam steps on TRAIN so that it suggests real words."""
    torch.manual_seed(seed)
    model = build_model(ModelConfig(vocab_size=tok.vocab_size, block_size=128, n_layer=2, n_embd=32, n_head=2,
                                    mlp_ratio=2, **FAMILIES[name]))  # type: ignore[arg-type]
    return fit_sentences(model, tok, TRAIN, steps)


def _every_character(text: str) -> list[int]:
    """Each offset of the body, after the subject's blank line: every kind of prompt end."""
    start = text.index("\n\n") + 2
    return list(range(start + 1, len(text) + 1))


def _same(got: Completion, want: Completion) -> None:
    assert got.text == want.text and got.ids == want.ids
    assert got.word_confidences == pytest.approx(want.word_confidences, abs=1e-5)
    assert got.confidence == pytest.approx(want.confidence, abs=1e-5)


@pytest.mark.parametrize("name", sorted(FAMILIES))
@pytest.mark.parametrize("max_words", [1, 3])
def test_propose_positions_equals_complete_at_every_position(bpe: Tokenizer, name: str, max_words: int) -> None:
    model = _model(name, bpe)
    positions = [_every_character(t) for t in EMAILS]
    stats: dict[str, int] = {}
    got = propose_positions(model, bpe, EMAILS, positions, max_words=max_words, lanes=7, stats=stats)
    assert batchable(model, None) == (name in ("rnn", "gru", "mingru"))
    shown = 0
    for text, where, answers in zip(EMAILS, positions, got):
        assert len(answers) == len(where)
        for i, c in zip(where, answers):
            _same(c, complete(model, bpe, text[:i], max_words=max_words, temperature=0.0, rule=FIRST_WORD))
            shown += bool(c.text)
    assert shown > 0  # the comparison covers real suggestions, not only empty ones
    assert stats["proposals"] == sum(len(p) for p in positions)
    if name != "gru-learned":  # each email's tokens fed about once, far fewer than every prompt again
        assert stats["fed_tokens"] < stats["prompt_tokens"] / 4


@pytest.mark.parametrize("mixer", ["attention", "gru"])
def test_a_context_read_by_cross_attention(bpe: Tokenizer, mixer: str) -> None:
    """Each email's own context (the message answered): attention reuses its prefix, a GRU encodes each prompt."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=bpe.vocab_size, block_size=128, n_layer=1, n_embd=32, n_head=2,
                                    mixer=mixer, pos="rope" if mixer == "attention" else "none",
                                    context="cross")).eval()  # type: ignore[arg-type]
    contexts = [ContextBatch.from_lists([bpe.encode(t)[:20]]) for t in TRAIN[:2]]
    positions = [_every_character(t)[:25] for t in EMAILS[:2]]
    got = propose_positions(model, bpe, EMAILS[:2], positions, max_words=2, contexts=contexts)
    for text, where, ctx, answers in zip(EMAILS, positions, contexts, got):
        for i, c in zip(where, answers):
            _same(c, complete(model, bpe, text[:i], max_words=2, temperature=0.0, rule=FIRST_WORD, context=ctx))


def test_a_phrase_blend_is_asked_one_by_one() -> None:
    tok = ByteTokenizer()
    model = _model("gru", tok, steps=0)
    phrases = PhraseModel.fit([np.array(tok.encode_email(t)) for t in TRAIN * 3], tok, weight=0.5)
    where = [[12, 20, 21, 30]]
    got = propose_positions(model, tok, TRAIN[:1], where, max_words=2, phrases=phrases)[0]
    for i, c in zip(where[0], got):
        _same(c, complete(model, tok, TRAIN[0][:i], max_words=2, temperature=0.0, rule=FIRST_WORD, phrases=phrases))
    assert any(c.text for c in got)


def test_byte_tokenizer_and_a_threshold() -> None:
    tok = ByteTokenizer()
    model = _model("gru", tok, seed=3, steps=5)
    positions = [[5, 9, 10, 14], [4, 8, 8, 6]]  # repeated and backward positions too
    texts = EMAILS[:2]
    got = propose_positions(model, tok, texts, positions, max_words=2, lanes=3, rule="expected-chars",
                            threshold=0.0)
    for text, where, answers in zip(texts, positions, got):
        for i, c in zip(where, answers):
            _same(c, complete(model, tok, text[:i], max_words=2, temperature=0.0, rule="expected-chars",
                              threshold=0.0))


def test_stack_states_concatenates_lanes() -> None:
    model = _model("gru", ByteTokenizer(), steps=0)
    with torch.inference_mode():
        _, a = model(torch.tensor([[1, 2, 3]]))
        _, b = model(torch.tensor([[4, 5]]))
        both = stack_states([a, b])
    for layer, la, lb in zip(both.layers, a.layers, b.layers):
        assert torch.equal(layer, torch.cat([la, lb]))
    assert both.pos.tolist() == [3, 2]


def test_bad_arguments_are_refused(bpe: Tokenizer) -> None:
    model = _model("gru", bpe, steps=0)
    with pytest.raises(ValueError, match="one list per email"):
        propose_positions(model, bpe, EMAILS, [[3]], max_words=2)
    with pytest.raises(ValueError, match="max_words"):
        propose_positions(model, bpe, EMAILS[:1], [[3]], max_words=0)
