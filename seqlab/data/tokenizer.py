"""Tokenizers: text <-> token ids, exactly reversible, behind one interface with two kinds.

- `ByteTokenizer`: ids 0-255 are the UTF-8 bytes, then `<|bos|>` 256 (start of an email), `<|eos|>` 257
  (end of an email), `<|pad|>` 258; vocab_size 259. Needs no fitting; the default for small models.
- `BPETokenizer`: byte-level BPE trained with the HF `tokenizers` library (ByteLevel pre-tokenizer with
  add_prefix_space=False, no normalizer, every byte in the initial alphabet so nothing is ever unknown).
  The three special tokens get the ids right after the BPE vocabulary.

Exactness: `decode(encode(s)) == s` for every string without lone surrogates (which UTF-8 cannot carry;
`encode` replaces each by U+FFFD). Special tokens exist only as ids: they are never registered as HF
added tokens, so text that literally contains "<|eos|>" is encoded as ordinary bytes. Decoding joins the
raw bytes of each token (`token_bytes`) and decodes them with errors="replace", so a partial sequence
cut inside a multi-byte character (as generation produces) still decodes.

tokenizer.json is one JSON object, written compactly and deterministically (byte-identical for the same
training input): {"seqlab": {"format": 1, "kind": "byte"|"bpe", "vocab_size": N, "specials":
{"<|bos|>": id, "<|eos|>": id, "<|pad|>": id}}, "hf": <the HF tokenizer JSON, BPE only>}.
`sha256()` is the digest of exactly those bytes. Fitting one on a DATA_DIR's train split is the writers'
side (`seqlab.data.prepare.tokenizer_fit`); reading one back is here, for both sides.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from seqlab.errors import UserError
from seqlab.private_files import private_opener

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIALS: tuple[str, str, str] = (BOS, EOS, PAD)
FORMAT = 1
KINDS = ("byte", "bpe")
MIN_BPE_VOCAB = 256 + len(SPECIALS)
_SURROGATES = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """Replace lone surrogates (not representable in UTF-8) by U+FFFD; other text is returned as is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATES.sub("\ufffd", text)
    return text


@lru_cache(maxsize=1)
def byte_to_char() -> dict[int, str]:
    """The byte-level alphabet of GPT-2 (Radford et al. 2019) that HF's ByteLevel uses: printable
    Latin-1 bytes stand for themselves, the other 68 bytes map in order to chr(256), chr(257), ..."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@lru_cache(maxsize=1)
def char_to_byte() -> dict[str, int]:
    """Inverse of `byte_to_char`."""
    return {c: b for b, c in byte_to_char().items()}


class Tokenizer(ABC):
    """The interface every tokenizer kind implements; ids are 0..vocab_size-1."""

    kind: str
    vocab_size: int
    bos_id: int
    eos_id: int
    pad_id: int
    _table: list[bytes]  # raw bytes of each id, b"" for specials; length vocab_size

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without special tokens."""

    @abstractmethod
    def _meta_and_payload(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The "seqlab" section and, for BPE, the "hf" section of tokenizer.json."""

    def encode_batch(self, texts: Iterable[str]) -> list[list[int]]:
        """`encode` of each text."""
        return [self.encode(t) for t in texts]

    def encode_email(self, text: str) -> list[int]:
        """One email as the model sees it: [bos] + encode(text) + [eos]."""
        return [self.bos_id, *self.encode(text), self.eos_id]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`: specials dropped, bytes decoded with errors="replace"."""
        if len(ids) == 0:
            return ""
        lo, hi = min(ids), max(ids)
        if lo < 0 or hi >= self.vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"token id {int(bad)} is outside the vocabulary of size {self.vocab_size}")
        table = self._table
        return b"".join([table[i] for i in ids]).decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        """Raw bytes one token stands for (b"" for specials); used for bits per byte and word ends."""
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id} is outside the vocabulary of size {self.vocab_size}")
        return self._table[token_id]

    def is_special(self, token_id: int) -> bool:
        """True for bos, eos and pad."""
        return token_id in (self.bos_id, self.eos_id, self.pad_id)

    def specials(self) -> dict[str, int]:
        """Special token names and their ids."""
        return {BOS: self.bos_id, EOS: self.eos_id, PAD: self.pad_id}

    def to_json(self) -> str:
        """tokenizer.json contents: compact, key order fixed by construction, hence deterministic."""
        meta, payload = self._meta_and_payload()
        doc: dict[str, Any] = {"seqlab": meta}
        if payload is not None:
            doc["hf"] = payload
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))

    def sha256(self) -> str:
        """Hex digest of the bytes `save` writes."""
        return hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()

    def save(self, path: Path) -> None:
        """Write tokenizer.json atomically (temporary name, fsync, rename)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb", opener=private_opener) as f:  # fitted on mail: 0600
            f.write(self.to_json().encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def _base_meta(self) -> dict[str, Any]:
        return {"format": FORMAT, "kind": self.kind, "vocab_size": self.vocab_size, "specials": self.specials()}


class ByteTokenizer(Tokenizer):
    """UTF-8 bytes as tokens 0-255, then bos 256, eos 257, pad 258."""

    kind = "byte"

    def __init__(self) -> None:
        self.vocab_size = 256 + len(SPECIALS)
        self.bos_id, self.eos_id, self.pad_id = 256, 257, 258
        self._table = [bytes([b]) for b in range(256)] + [b""] * len(SPECIALS)

    def encode(self, text: str) -> list[int]:
        return list(clean_text(text).encode("utf-8"))

    def _meta_and_payload(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        return self._base_meta(), None


class BPETokenizer(Tokenizer):
    """Byte-level BPE from HF `tokenizers`; bos, eos, pad take the three ids after the BPE vocabulary."""

    kind = "bpe"

    def __init__(self, hf_json: dict[str, Any]) -> None:
        """Build from the HF tokenizer JSON (as a dict); raises ValueError when it is not byte-level BPE
        without normalizer, added tokens or dropout (any of which would break exact round trips)."""
        from tokenizers import Tokenizer as HFTokenizer  # deferred: no work at import time

        _check_hf_json(hf_json)
        self._hf_json = hf_json
        self._hf = HFTokenizer.from_str(json.dumps(hf_json))
        vocab = self._hf.get_vocab(with_added_tokens=True)
        n = len(vocab)
        if sorted(vocab.values()) != list(range(n)):
            raise ValueError("the BPE vocabulary ids are not 0..n-1")
        decode_char = char_to_byte()
        table: list[bytes] = [b""] * (n + len(SPECIALS))
        for token, idx in vocab.items():
            if any(c not in decode_char for c in token):
                raise ValueError(f"BPE token {token!r} is not in the byte-level alphabet")
            table[idx] = bytes(decode_char[c] for c in token)
        if len({table[i] for i in range(n) if len(table[i]) == 1}) != 256:
            raise ValueError("the BPE vocabulary does not cover all 256 bytes")
        self._table = table
        self.vocab_size = n + len(SPECIALS)
        self.bos_id, self.eos_id, self.pad_id = n, n + 1, n + 2

    def encode(self, text: str) -> list[int]:
        return self._hf.encode(clean_text(text), add_special_tokens=False).ids

    def encode_batch(self, texts: Iterable[str]) -> list[list[int]]:
        """Encodes in parallel in HF's Rust code; without offsets when the installed version allows."""
        batch = [clean_text(t) for t in texts]
        fast = getattr(self._hf, "encode_batch_fast", None) or self._hf.encode_batch
        return [e.ids for e in fast(batch, add_special_tokens=False)]

    def _meta_and_payload(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        return self._base_meta(), self._hf_json


def _check_hf_json(hf: dict[str, Any]) -> None:
    """The HF settings our exactness guarantee depends on."""
    if not isinstance(hf, dict):
        raise ValueError("the 'hf' section is not a JSON object")
    model, pre = hf.get("model") or {}, hf.get("pre_tokenizer") or {}
    problems = [
        (model.get("type") != "BPE", "the model is not BPE"),
        (model.get("dropout") not in (None, 0, 0.0), "BPE dropout is set"),
        # HF slices merges by these affixes' lengths without checking them (a Rust panic, not an error).
        (model.get("continuing_subword_prefix") not in (None, ""), "a continuing-subword prefix is set"),
        (model.get("end_of_word_suffix") not in (None, ""), "an end-of-word suffix is set"),
        (hf.get("normalizer") is not None, "a normalizer is set"),
        (pre.get("type") != "ByteLevel" or pre.get("add_prefix_space") is not False,
         "the pre-tokenizer is not ByteLevel without prefix space"),
        (bool(hf.get("added_tokens")), "HF added tokens are present"),
        (hf.get("post_processor") is not None, "a post-processor is set"),
    ]
    for bad, why in problems:
        if bad:
            raise ValueError(why)


def tokenizer_from_json(text: str, source: str = "the tokenizer JSON") -> Tokenizer:
    """Rebuild a tokenizer from `to_json()` output; UserError when it is not a valid seqlab tokenizer."""
    try:
        doc = json.loads(text)
        meta = doc["seqlab"]
        kind, fmt = meta["kind"], meta["format"]
    except (ValueError, KeyError, TypeError, RecursionError) as e:  # RecursionError: "[[[[..." nested too deep
        raise UserError(f"{source} is not a seqlab tokenizer file ({type(e).__name__}: {e}).") from None
    if fmt != FORMAT or kind not in KINDS:
        raise UserError(f"{source} has an unsupported tokenizer format {fmt!r} or kind {kind!r}.")
    try:
        tok: Tokenizer = ByteTokenizer() if kind == "byte" else BPETokenizer(doc["hf"])
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # HF raises its own types, and a Rust panic is a BaseException (pyo3_runtime)
        raise UserError(f"{source} holds an invalid {kind} tokenizer ({e}).") from None
    if meta.get("vocab_size") != tok.vocab_size or meta.get("specials") != tok.specials():
        raise UserError(f"{source} records a vocabulary size or special tokens that do not match its contents.")
    return tok


def load_tokenizer(path: Path) -> Tokenizer:
    """Load tokenizer.json written by `Tokenizer.save`; UserError when missing or invalid."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"Tokenizer file {path} does not exist.") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"Cannot read tokenizer file {path} ({e}).") from None
    return tokenizer_from_json(text, source=f"Tokenizer file {path}")
