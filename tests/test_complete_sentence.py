"""Longer suggestions: up to the end of the sentence (`sentence=True`), and the early stop of greedy decoding
under the expected-chars rule (`value_stop=True`, `seqlab.generation.stops.ValueStop`), each compared with
the decoding that runs on without it."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_fit import fit_sentences

from seqlab.config import ModelConfig
from seqlab.data.prepare.tokenizer_fit import fit_tokenizer
from seqlab.data.tokenizer import ByteTokenizer, Tokenizer
from seqlab.generation import stops
from seqlab.generation.batched import propose_positions
from seqlab.generation.complete import MAX_SENTENCE_WORDS, Completion, complete, finish
from seqlab.generation.gate import EXPECTED_CHARS, FIRST_WORD, kept_words
from seqlab.generation.stops import SENTENCE_END, WordStop
from seqlab.models import build_model

TRAIN = ["Thanks for the file. I will send the figures soon! See you at noon.\nBest, Ann",
         "Could you send me the file? I will find the figures for you. See you soon.",
         "Meeting at noon\n\nsee you at the game. bye now! Thanks again."]
PROMPTS = ["Files\n\nThanks for the", "Files\n\nCould you send me the fi", "Re\n\nsee you at the game. ",
           "Hi\n\nI will find the figures", "Hi\n\nThanks", "Noon\n\nMeeting at noon", "x\n\nSee you at "]


@pytest.fixture(scope="module")
def trained() -> tuple[torch.nn.Module, Tokenizer]:
    tok = fit_tokenizer("bpe", TRAIN * 20, vocab_size=300)
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=tok.vocab_size, block_size=128, mixer="gru", pos="none", n_layer=1,
                                    n_embd=32, mlp_ratio=0))
    return fit_sentences(model, tok, TRAIN, 60), tok


def test_word_stop_and_finish_end_at_a_sentence_end() -> None:
    tok = ByteTokenizer()
    ids = list(b" the file. Thanks a lot")
    stop = WordStop(tok, 12, True, sentence=True)
    assert not stop(list(b" the file.")) and stop(list(b" the file. "))  # "." ends it once whitespace follows
    assert not stop(list(b" e.g")) and not WordStop(tok, 12, True)(list(b" the file. "))
    c = finish(tok, ids, [0.0] * len(ids), skip=0, max_words=12, stop_at_newline=True, sentence=True)
    assert c.text == " the file." and c.ids == list(b" the file.")
    assert finish(tok, ids, [0.0] * len(ids), skip=0, max_words=12, stop_at_newline=True).text == " the file. Thanks a"
    question = list(b" ready? yes\n")
    assert finish(tok, question, [0.0] * len(question), skip=0, max_words=12, stop_at_newline=True,
                  sentence=True).text == " ready?"


def _cut_at_sentence(c: Completion) -> tuple[str, int]:
    """(the text of `c` up to its first sentence end, how many words that is)."""
    end = SENTENCE_END.search(c.text.encode())
    text = c.text if end is None else c.text.encode()[: end.end()].decode()
    return text, len(text.split())


@pytest.mark.parametrize("prompt", PROMPTS)
def test_a_sentence_suggestion_is_the_long_one_cut_at_its_sentence_end(trained: tuple, prompt: str) -> None:
    model, tok = trained
    longer = complete(model, tok, prompt, max_words=MAX_SENTENCE_WORDS, temperature=0.0, rule=FIRST_WORD)
    sentence = complete(model, tok, prompt, max_words=MAX_SENTENCE_WORDS, temperature=0.0, rule=FIRST_WORD,
                        sentence=True)
    text, words = _cut_at_sentence(longer)
    assert sentence.text == text
    assert sentence.word_confidences == pytest.approx(longer.word_confidences[:words], abs=1e-6)


def test_sentence_suggestions_in_lanes_equal_complete(trained: tuple) -> None:
    model, tok = trained
    text = "Files\n\nThanks for the file. I will send the figures soon! See you"
    where = list(range(8, len(text) + 1))
    got = propose_positions(model, tok, [text], [where], max_words=MAX_SENTENCE_WORDS, sentence=True, lanes=5)[0]
    sentences = 0
    for i, c in zip(where, got):
        want = complete(model, tok, text[:i], max_words=MAX_SENTENCE_WORDS, temperature=0.0, rule=FIRST_WORD,
                        sentence=True)
        assert c.text == want.text and c.ids == want.ids
        sentences += c.text.rstrip().endswith((".", "!", "?"))
    assert sentences > 0


class _Counting(stops.ValueStop):
    """ValueStop that counts the decodings it ended, so the test knows the bound was reached."""

    fired = 0

    def __call__(self, ids: list[int], logps: list[float]) -> bool:
        done = super().__call__(ids, logps)
        _Counting.fired += done
        return done


@pytest.mark.parametrize("budget", [None, 24])
def test_the_value_stop_shows_what_the_full_decoding_shows(trained: tuple, budget: int | None,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """With a threshold the suggestion is the same; without one (the server gates it later) its best prefix is.
    Half-trained weights too, so that some decodings grow unsure and the bound is reached."""
    model, tok = trained
    half = build_model(model.cfg)
    half.load_state_dict({k: 0.4 * v for k, v in model.state_dict().items()})
    monkeypatch.setattr("seqlab.generation.complete.ValueStop", _Counting)
    _Counting.fired = 0
    for m in (model, half.eval()):
        for prompt in PROMPTS:
            for t in (None, 0.0, 0.5, 2.0, 6.0):
                kw = dict(max_words=MAX_SENTENCE_WORDS, temperature=0.0, rule=EXPECTED_CHARS, threshold=t,
                          sentence=True, max_new_tokens=budget)
                full = complete(m, tok, prompt, **kw)
                fast = complete(m, tok, prompt, value_stop=True, **kw)
                if t is None:
                    best = kept_words(full.text, full.word_confidences, EXPECTED_CHARS, 0.0)
                    assert kept_words(fast.text, fast.word_confidences, EXPECTED_CHARS, 0.0) == best
                    assert fast.word_confidences[:best] == pytest.approx(full.word_confidences[:best], abs=1e-9)
                    assert fast.text.split()[:best] == full.text.split()[:best]
                else:
                    assert (fast.text, fast.ids) == (full.text, full.ids)
                    assert fast.word_confidences == pytest.approx(full.word_confidences, abs=1e-9)
    assert _Counting.fired > 0


def test_the_value_bound_by_hand() -> None:
    """" ab " with P = 0.9, 0.9, 0.9, 0.3 (byte tokens, one byte each): the whole word "ab" is worth
    0.729 * (3 - 1) = 1.458; a longer prefix at most P_4 * (4 + (budget - 4) * 1 - 1) = 0.2187 * (budget - 1),
    1.3122 at a budget of 7 (stop) and 1.5309 at 8 (go on)."""
    tok = ByteTokenizer()
    ids, logps = list(b" ab "), [math.log(0.9)] * 3 + [math.log(0.3)]
    assert stops.longest_token(tok) == 1
    stop = {b: stops.ValueStop(tok, 12, b, 0, True, True) for b in (7, 8)}
    assert stop[7](ids, logps) and not stop[8](ids, logps)
    assert not stop[7](ids[:3], logps[:3])  # no whole word yet: nothing to compare with
    # below a threshold both ways, the suggestion is withheld whatever follows
    assert stops.ValueStop(tok, 12, 8, 0, True, True, threshold=1.6)(ids, logps)
    assert not stops.ValueStop(tok, 12, 8, 0, True, True, threshold=1.5)(ids, logps)
