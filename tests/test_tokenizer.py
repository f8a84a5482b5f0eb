"""Tests for seqlab.data.tokenizer: exact round trips, deterministic files, byte accounting."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from seqlab.data.prepare.tokenizer_fit import fit_tokenizer
from seqlab.data.tokenizer import (
    SPECIALS,
    BPETokenizer,
    ByteTokenizer,
    Tokenizer,
    byte_to_char,
    load_tokenizer,
    tokenizer_from_json,
)
from seqlab.errors import UserError

WORDS = ("the report meeting please send slides before friday thanks regards budget review draft "
         "schedule attached could you call me tomorrow about contract naïve café résumé").split()


def corpus(n: int = 300, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randrange(5, 25))]
        out.append(f"Subject {rng.randrange(100)}\n\nHi {rng.choice(WORDS)},\n" + " ".join(words) + ".\n")
    return out


@cache
def bpe(vocab_size: int = 400) -> BPETokenizer:
    tok = fit_tokenizer("bpe", iter(corpus()), vocab_size=vocab_size)
    assert isinstance(tok, BPETokenizer)
    return tok


def kinds() -> list[Tokenizer]:
    return [ByteTokenizer(), bpe()]


# Arbitrary text mixed with the literal text of special tokens and pieces of it.
pieces = st.one_of(st.text(), st.sampled_from([*SPECIALS, "<|", "|>", "<|eos", "\r\n", " \t ", "é", "😀"]))
texts = st.lists(pieces, max_size=8).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
@example("e\u0301 \ufb01 \u212b \ufeff\u2028  \x00")  # would change under NFC/NFKC or stripping
@example("  leading and trailing  \n\n")
@example("<|bos|><|eos|><|pad|>")
def test_round_trip_is_exact_for_any_text(s: str) -> None:
    for tok in kinds():
        ids = tok.encode(s)
        assert tok.decode(ids) == s
        assert not any(tok.is_special(i) for i in ids)  # literal "<|eos|>" is ordinary text
        assert b"".join(tok.token_bytes(i) for i in ids) == s.encode("utf-8")
        email = tok.encode_email(s)
        assert email == [tok.bos_id, *ids, tok.eos_id]
        assert tok.decode(email) == s


def test_bpe_decode_agrees_with_hf_decoder() -> None:
    tok = bpe()
    for s in corpus(20, seed=3) + ["naïve 😀 <|bos|>\n\n  x"]:
        ids = tok.encode(s)
        assert tok.decode(ids) == tok._hf.decode(ids) == s


def test_byte_alphabet_matches_hf() -> None:
    from tokenizers import pre_tokenizers

    assert sorted(byte_to_char().values()) == sorted(pre_tokenizers.ByteLevel.alphabet())
    assert len(set(byte_to_char().values())) == 256


def test_lone_surrogates_are_replaced_not_crashing() -> None:
    for tok in kinds():
        assert tok.decode(tok.encode("a\ud800b")) == "a\ufffdb"


def test_partial_utf8_decodes_with_replacement() -> None:
    tok = ByteTokenizer()
    ids = tok.encode("é😀")
    assert tok.decode(ids[:1]) == "\ufffd"
    assert tok.decode(ids[:3]).startswith("é")


def test_byte_tokenizer_layout() -> None:
    tok = ByteTokenizer()
    assert (tok.vocab_size, tok.bos_id, tok.eos_id, tok.pad_id) == (259, 256, 257, 258)
    assert tok.encode("A\u00e9") == [65, 0xC3, 0xA9]
    assert [tok.token_bytes(i) for i in (256, 257, 258)] == [b"", b"", b""]
    assert tok.decode([256, 72, 258, 105, 257]) == "Hi"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([259])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([-1])


@pytest.mark.parametrize("kind", ["byte", "bpe"])
def test_save_load_round_trip(kind: str, tmp_path: Path) -> None:
    tok = ByteTokenizer() if kind == "byte" else bpe()
    path = tmp_path / "tokenizer.json"
    tok.save(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == tok.sha256()
    loaded = load_tokenizer(path)
    assert type(loaded) is type(tok) and loaded.kind == kind
    assert loaded.to_json() == tok.to_json()
    assert (loaded.vocab_size, loaded.bos_id, loaded.eos_id, loaded.pad_id) == (
        tok.vocab_size, tok.bos_id, tok.eos_id, tok.pad_id)
    sample = corpus(30, seed=5) + ["<|pad|> 😀 ünïcode"]
    assert loaded.encode_batch(sample) == tok.encode_batch(sample)


def test_bpe_fit_is_deterministic_in_and_across_processes() -> None:
    a = fit_tokenizer("bpe", iter(corpus()), vocab_size=400).to_json()
    assert a == fit_tokenizer("bpe", iter(corpus()), vocab_size=400).to_json()
    # A fresh interpreter has other hash seeds (Python's and Rust's); the file must not change.
    code = ("import sys; sys.path.insert(0, 'tests'); from test_tokenizer import bpe; "
            "sys.stdout.write(bpe().sha256())")
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout == hashlib.sha256(a.encode("utf-8")).hexdigest()


def test_bpe_compresses_english() -> None:
    tok = bpe()
    held_out = "".join(corpus(50, seed=9))
    n_tokens, n_bytes = len(tok.encode(held_out)), len(held_out.encode("utf-8"))
    assert n_tokens < 0.5 * n_bytes, (n_tokens, n_bytes)
    assert len(ByteTokenizer().encode(held_out)) == n_bytes


def test_encode_batch_matches_encode() -> None:
    tok = bpe()
    sample = corpus(40, seed=4) + ["", "\ud800x"]
    assert tok.encode_batch(sample) == [tok.encode(s) for s in sample]


@pytest.mark.parametrize("vocab_size", [259, 300, 500])
def test_vocab_size_respected(vocab_size: int) -> None:
    tok = fit_tokenizer("bpe", iter(corpus()), vocab_size=vocab_size)
    assert 259 <= tok.vocab_size <= vocab_size
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == tuple(range(tok.vocab_size - 3, tok.vocab_size))
    ids = [i for t in corpus(50, seed=6) for i in tok.encode_email(t)]
    assert max(ids) < tok.vocab_size
    if vocab_size == 259:  # no room for merges: one token per byte
        assert all(len(tok.token_bytes(i)) == 1 for i in range(256))
    if vocab_size == 300:  # plenty of frequent pairs: the budget is used in full
        assert tok.vocab_size == 300


def test_ids_fit_uint16() -> None:
    for tok in kinds():
        assert tok.vocab_size - 1 <= np.iinfo(np.uint16).max
        ids = tok.encode_email("naïve 😀 " + corpus(1)[0])
        assert np.asarray(ids, dtype=np.uint16).tolist() == ids


def test_byte_kind_ignores_texts_and_vocab_size() -> None:
    consumed = []
    tok = fit_tokenizer("byte", (consumed.append(1) or "x" for _ in range(3)), vocab_size=10)
    assert isinstance(tok, ByteTokenizer) and consumed == []


@pytest.mark.parametrize(("kind", "size"), [("wordpiece", 4096), ("bpe", 258), ("bpe", 3.5)])
def test_bad_fit_arguments_are_user_errors(kind: str, size: int) -> None:
    with pytest.raises(UserError):
        fit_tokenizer(kind, iter(["x"]), vocab_size=size)


def _tampered(change: str) -> str:
    doc = json.loads(bpe().to_json())
    if change == "normalizer":
        doc["hf"]["normalizer"] = {"type": "NFC"}
    elif change == "added":
        doc["hf"]["added_tokens"] = [{"id": 0, "content": "<|eos|>", "single_word": False, "lstrip": False,
                                      "rstrip": False, "normalized": False, "special": True}]
    elif change == "specials":
        doc["seqlab"]["specials"]["<|eos|>"] = 5
    elif change == "kind":
        doc["seqlab"]["kind"] = "unigram"
    elif change == "model":
        doc["hf"]["model"] = "nonsense"
    return json.dumps(doc)


@pytest.mark.parametrize("change", ["normalizer", "added", "specials", "kind", "model"])
def test_invalid_tokenizer_json_is_a_user_error(change: str) -> None:
    with pytest.raises(UserError):
        tokenizer_from_json(_tampered(change))


def test_load_missing_or_garbage_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_tokenizer(tmp_path / "nope.json")
    for content in (b"{not json", b"[1, 2]", b'{"seqlab": 3}', b"\xff\xfe"):
        bad = tmp_path / "bad.json"
        bad.write_bytes(content)
        with pytest.raises(UserError):
            load_tokenizer(bad)
