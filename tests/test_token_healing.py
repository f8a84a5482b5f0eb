"""Completion at a partial word with a BPE tokenizer (token healing in `seqlab.generation.complete`).

A tiny GRU is trained for a few hundred Adam steps on two sentences whose words BPE merges whole (" file",
" figures"), so a prompt ending in " fi" is a piece it never saw followed by "le". The healed completion is
compared with a full-recompute greedy decoder written here (every step one full forward over the whole
sequence, the first token restricted by hand), and it must finish the typed word.
"""

from __future__ import annotations

import math

import pytest
import torch
from tiny_fit import fit_sentences

from seqlab.config import ModelConfig
from seqlab.data.prepare.tokenizer_fit import fit_tokenizer
from seqlab.data.tokenizer import ByteTokenizer, Tokenizer
from seqlab.generation.complete import complete, encode_prompt
from seqlab.models import build_model

SENTENCES = ["could you send me the file, please", "I will find the figures for you"]


@pytest.fixture(scope="module")
def trained() -> tuple[torch.nn.Module, Tokenizer]:
    tok = fit_tokenizer("bpe", SENTENCES * 30, vocab_size=300)
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=tok.vocab_size, block_size=32, mixer="gru", pos="none",
                                    n_layer=1, n_embd=32, mlp_ratio=0))
    return fit_sentences(model, tok, SENTENCES, 150), tok


def test_a_partial_word_is_healed_to_the_tokens_that_extend_it() -> None:
    tok = fit_tokenizer("bpe", SENTENCES * 30, vocab_size=300)
    prompt = "could you send me the fi"
    ids, allowed, skip = encode_prompt(tok, prompt)
    piece = prompt.encode()[len(b"".join(tok.token_bytes(i) for i in ids[1:])):]
    assert piece == b" fi" and skip == len(piece)  # the dropped token and the healed bytes are the same
    assert allowed is not None
    assert [bool(allowed[i]) for i in range(tok.vocab_size)] == [
        tok.token_bytes(i).startswith(piece) for i in range(tok.vocab_size)]
    assert bool(allowed[tok.encode(" file")[0]]) and bool(allowed[tok.encode(" figures")[0]])
    # the byte tokenizer has nothing to heal inside a word
    assert encode_prompt(ByteTokenizer(), prompt) == ([ByteTokenizer().bos_id, *prompt.encode()], None, 0)


def _full_recompute_greedy(model: torch.nn.Module, tok: Tokenizer, prompt: str, steps: int
                           ) -> tuple[list[int], list[float]]:
    """Greedy decoding by one full forward per step (no state), the first token limited to the healed set."""
    ids, allowed, _ = encode_prompt(tok, prompt)
    seq, out, logps = list(ids), [], []
    with torch.no_grad():
        for t in range(steps):
            logits = model(torch.tensor([seq]))[0][0, -1]
            if t == 0 and allowed is not None:
                logits = logits.masked_fill(~allowed, float("-inf"))
            nxt = int(logits.argmax())
            out.append(nxt)
            logps.append(float(logits.log_softmax(-1)[nxt]))
            if nxt == tok.eos_id:
                break
            seq.append(nxt)
    return out, logps


@pytest.mark.parametrize("prompt", ["could you send me the fi", "I will fi", "could you send me the file"])
def test_completion_at_a_partial_word_equals_full_recompute_and_finishes_the_word(
        trained: tuple[torch.nn.Module, Tokenizer], prompt: str) -> None:
    model, tok = trained
    c = complete(model, tok, prompt, max_words=3, stop_at_newline=True)
    ids, logps = _full_recompute_greedy(model, tok, prompt, len(c.ids))
    assert c.ids == ids[: len(c.ids)]
    _, _, skip = encode_prompt(tok, prompt)
    generated = b"".join(tok.token_bytes(i) for i in c.ids)
    assert generated[:skip] == prompt.encode()[-skip:]  # the healed bytes are honoured ...
    assert generated[skip:].decode() == c.text  # ... and not repeated in the suggestion
    # confidence: the probability of the first (here: the rest of the typed) word, from the full forward
    starts = [0]
    for i in c.ids[:-1]:
        starts.append(starts[-1] + len(tok.token_bytes(i)))
    end = skip + len(c.text.split(" ")[0].encode()) if c.text else 0
    assert c.confidence == pytest.approx(math.exp(sum(lp for s, lp in zip(starts, logps) if s < end)), rel=1e-4)
    full = next(s for s in SENTENCES if s.startswith(prompt.rsplit(" ", 1)[0]))
    assert full.startswith(prompt + c.text)  # the trained model finishes the word it was taught


def test_without_healing_the_piece_is_a_context_the_model_never_saw(trained: tuple[torch.nn.Module, Tokenizer]
                                                                    ) -> None:
    """Why healing matters: fed " fi" as a token, the model's best next piece is not "le"."""
    model, tok = trained
    prompt = "could you send me the fi"
    healed = complete(model, tok, prompt, max_words=1)
    assert healed.text.startswith("le")
    raw = [tok.bos_id, *tok.encode(prompt)]
    with torch.no_grad():
        logits = model(torch.tensor([raw]))[0][0, -1]
    probs = logits.softmax(-1)
    le = [i for i in range(tok.vocab_size) if tok.token_bytes(i).startswith(b"le")]
    assert float(probs[le].sum()) < healed.confidence
