"""Fuzzing the tokenizers (extends test_tokenizer.py, whose round trip covers text without lone surrogates):
any text including lone surrogates, any id sequence, BPE fitted on any texts, any damage to tokenizer.json.
Each ends in an exact round trip of the cleaned text, or a ValueError / UserError, never another exception."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_tokenizer import bpe, corpus, kinds, pieces

from seqlab.data.prepare.tokenizer_fit import fit_tokenizer
from seqlab.data.tokenizer import (
    MIN_BPE_VOCAB,
    ByteTokenizer,
    byte_to_char,
    clean_text,
    tokenizer_from_json,
)
from seqlab.errors import UserError

# Text with lone surrogates too (st.text() leaves them out): what a careless caller or a decoder hands over.
_any_chars = st.characters(codec=None, categories=["Cs", "Lu", "Ll", "Nd", "Zs", "Cc", "Cf", "Mn", "So"])
surrogate_texts = st.lists(st.one_of(pieces, st.text(_any_chars, max_size=10)), max_size=6).map("".join)


@settings(max_examples=300, deadline=None)
@given(surrogate_texts, surrogate_texts)
def test_any_text_round_trips_as_its_cleaned_form(s: str, t: str) -> None:
    for tok in kinds():
        ids = tok.encode(s)
        assert ids == tok.encode(clean_text(s))  # a lone surrogate is exactly a U+FFFD
        assert tok.decode(ids) == clean_text(s)
        assert tok.encode_batch([s, t, s]) == [ids, tok.encode(t), ids]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["byte", "bpe"]), st.data())
def test_decode_of_any_ids(kind: str, data: st.DataObject) -> None:
    tok = ByteTokenizer() if kind == "byte" else bpe()
    ids = data.draw(st.lists(st.integers(-3, tok.vocab_size + 3), max_size=40))
    if all(0 <= i < tok.vocab_size for i in ids):
        text = tok.decode(ids)
        assert text == b"".join(tok.token_bytes(i) for i in ids).decode("utf-8", errors="replace")
        for dtype in (np.uint16, np.int64):  # what a token store or a tensor's .tolist()-less caller passes
            assert tok.decode(np.asarray(ids, dtype=dtype)) == text
    else:
        with pytest.raises(ValueError, match="outside the vocabulary"):
            tok.decode(ids)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(surrogate_texts, max_size=12), st.integers(MIN_BPE_VOCAB, 700), surrogate_texts)
def test_bpe_fitted_on_any_texts_is_exact(train: list[str], vocab_size: int, other: str) -> None:
    tok = fit_tokenizer("bpe", iter(train), vocab_size=vocab_size)
    assert MIN_BPE_VOCAB <= tok.vocab_size <= vocab_size
    loaded = tokenizer_from_json(tok.to_json())
    for s in [*train, other]:
        ids = tok.encode(s)
        assert tok.decode(ids) == clean_text(s) and loaded.encode(s) == ids


def _paths(node: object, path: tuple = ()) -> list[tuple]:
    """Every place in a JSON document (dict keys and list indices), the root included."""
    out = [path]
    if isinstance(node, dict):
        for key, child in node.items():
            out += _paths(child, (*path, key))
    elif isinstance(node, list):
        for i, child in enumerate(node):
            out += _paths(child, (*path, i))
    return out


json_values = st.recursive(st.none() | st.booleans() | st.integers(-2, 600) | st.floats(allow_nan=False)
                           | st.text(max_size=4), lambda c: st.lists(c, max_size=3) | st.dictionaries(
                               st.text(max_size=4), c, max_size=3), max_leaves=6)


def _damage_anywhere(doc: object, data: st.DataObject) -> object:
    """Replace or delete the value at any place in the document."""
    paths = _paths(doc)
    path = data.draw(st.sampled_from(paths[1:] if len(paths) > 1 else paths))
    new = data.draw(st.one_of(json_values, st.just(_DELETE)))
    if not path:
        return None if new is _DELETE else new
    parent: Any = doc
    for step in path[:-1]:
        parent = parent[step]
    if new is _DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return doc


def _has_bpe_model(doc: Any) -> bool:
    model = doc.get("hf", {}).get("model") if isinstance(doc, dict) and isinstance(doc.get("hf"), dict) else None
    return isinstance(model, dict) and isinstance(model.get("vocab"), dict) and isinstance(model.get("merges"), list)


def _damage_bpe(doc: Any, data: st.DataObject) -> Any:
    """Changes a valid file can survive: two tokens swap ids, merges reordered or dropped, a token renamed."""
    model = doc["hf"]["model"]
    vocab, merges = model["vocab"], model["merges"]
    how = data.draw(st.sampled_from(["swap_ids", "swap_merges", "drop_merges", "rename"]))
    if how == "swap_ids":
        a, b = data.draw(st.lists(st.sampled_from(sorted(vocab)), min_size=2, max_size=2, unique=True))
        vocab[a], vocab[b] = vocab[b], vocab[a]
    elif how == "swap_merges" and len(merges) >= 2:
        i, j = data.draw(st.lists(st.integers(0, len(merges) - 1), min_size=2, max_size=2, unique=True))
        merges[i], merges[j] = merges[j], merges[i]
    elif how == "drop_merges":
        model["merges"] = merges[: data.draw(st.integers(0, len(merges)))]
    elif how == "rename":
        old = data.draw(st.sampled_from(sorted(vocab)))
        vocab[data.draw(st.text(st.sampled_from(sorted(byte_to_char().values())), min_size=1, max_size=3))] = \
            vocab.pop(old)
    return doc


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_damaged_tokenizer_file_is_a_user_error_or_still_exact(data: st.DataObject) -> None:
    doc: Any = json.loads(bpe().to_json())
    for _ in range(data.draw(st.integers(1, 3))):
        damage = data.draw(st.sampled_from([_damage_anywhere, _damage_bpe]))
        if damage is _damage_anywhere or _has_bpe_model(doc):
            doc = damage(doc, data)
    try:
        tok = tokenizer_from_json(json.dumps(doc))
    except UserError as exc:
        assert str(exc)
        event("user error")
        return
    event("still a tokenizer")
    for s in corpus(5, seed=2) + ["naïve 😀 <|eos|>\n\n  x"]:
        assert tok.decode(tok.encode(s)) == s
    assert max(i for s in corpus(5, seed=2) for i in tok.encode_email(s)) < tok.vocab_size


_DELETE = object()


@pytest.mark.parametrize("field", ["continuing_subword_prefix", "end_of_word_suffix"])
def test_a_bpe_affix_longer_than_a_merge_is_a_user_error_not_a_rust_panic(field: str) -> None:
    """Found by the test above in CI: HF slices each merge by the affix's length unchecked and panics
    (pyo3's PanicException is a BaseException, so it escaped `except Exception`)."""
    doc = json.loads(bpe().to_json())
    doc["hf"]["model"][field] = "abcdefghijklmnop"
    with pytest.raises(UserError, match="prefix|suffix"):
        tokenizer_from_json(json.dumps(doc))


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=60), json_values.map(json.dumps)))
def test_any_text_as_a_tokenizer_file_is_a_user_error_or_a_tokenizer(text: str) -> None:
    try:
        tok = tokenizer_from_json(text)
    except UserError:
        return
    assert tok.decode(tok.encode("x y")) == "x y"
