"""The layout of a DATA_DIR that both sides share: the split names, the dtypes of the token files, and
meta.json read back and checked (ARCHITECTURE.md, "DATA_DIR").

`seqlab.data.store` and `seqlab.data.context_store` read the files with these; the writers in
`seqlab.data.prepare` write them with the same. numpy only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from seqlab.errors import UserError

__all__ = ["IDX_DTYPE", "SPLITS", "check_tokenizer", "dtype_from_meta", "load_meta", "meta_field", "meta_int",
           "token_dtype"]

SPLITS: tuple[str, str, str] = ("train", "val", "test")
IDX_DTYPE = np.dtype("<i8")  # email start offsets in `{split}.idx`


def token_dtype(vocab_size: int) -> np.dtype:
    """The on-disk dtype of token ids: little-endian uint16 when every id fits in 16 bits, else uint32."""
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be at least 1, not {vocab_size}")
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


def load_meta(data_dir: Path) -> dict[str, Any]:
    """Read `data_dir/meta.json`; a missing or unreadable file is a UserError."""
    path = Path(data_dir) / "meta.json"
    if not path.is_file():
        raise UserError(f"{data_dir} is not a prepared data folder (no meta.json); run `seqlab prepare` first.")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:  # nested too deep
        raise UserError(f"{path} cannot be read as JSON ({exc}); run `seqlab prepare` again.") from None
    if not isinstance(meta, dict):
        raise UserError(f"{path} does not hold a JSON object; run `seqlab prepare` again.")
    return meta


def meta_field(meta: dict[str, Any], data_dir: Path, *keys: str) -> dict[str, Any] | None:
    """meta[keys[0]][keys[1]]... when recorded (None if absent); a UserError if it is not a JSON object."""
    node: Any = meta
    for i, key in enumerate(keys):
        if key not in node:
            return None
        node = node[key]
        if not isinstance(node, dict):
            raise UserError(f"{data_dir / 'meta.json'} records {'.'.join(keys[:i + 1])} as a "
                            f"{type(node).__name__}, not an object; run `seqlab prepare` again.")
    return node


def meta_int(node: dict[str, Any], data_dir: Path, name: str) -> int | None:
    """The integer at the last part of the dotted `name` in `node`, None if absent; UserError if not an int."""
    value = node.get(name.rsplit(".", 1)[-1])
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise UserError(f"{data_dir / 'meta.json'} records {name} as {value!r}, not a count; "
                        "run `seqlab prepare` again.")
    return value


def check_tokenizer(data_dir: Path, meta: dict[str, Any], vocab_size: int, sha256: str) -> None:
    """tokenizer.json must be the one prepare recorded in meta.json (vocabulary size and sha256), else
    its ids would not mean the ids in the token files: a UserError naming the file."""
    tok = meta_field(meta, Path(data_dir), "tokenizer")
    if tok is None:
        return  # a hand-made folder that records no tokenizer: nothing to compare with
    path = Path(data_dir) / "tokenizer.json"
    recorded = meta_int(tok, Path(data_dir), "tokenizer.vocab_size")
    if recorded is not None and recorded != vocab_size:
        raise UserError(f"{path} has {vocab_size} ids but meta.json records {recorded}; it is not the "
                        "tokenizer this data was prepared with.")
    if "sha256" in tok and tok["sha256"] != sha256:
        raise UserError(f"{path} is not the tokenizer this data was prepared with (its sha256 differs from "
                        "the one in meta.json).")


def dtype_from_meta(meta: dict[str, Any], data_dir: Path) -> np.dtype:
    """`token_dtype` when present, else derived from the vocabulary size recorded by prepare."""
    name = meta.get("token_dtype")
    if name is not None:
        if name not in ("uint16", "uint32"):
            raise UserError(f"{data_dir}/meta.json names token_dtype {name!r}; expected uint16 or uint32.")
        return np.dtype(name).newbyteorder("<")
    tok = meta.get("tokenizer")
    vocab = meta.get("vocab_size", tok.get("vocab_size") if isinstance(tok, dict) else None)
    if not isinstance(vocab, int) or vocab < 1:
        raise UserError(f"{data_dir}/meta.json records neither token_dtype nor a vocabulary size.")
    return token_dtype(vocab)
