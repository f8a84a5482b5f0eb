"""Reading a DATA_DIR back and checking its contract (ARCHITECTURE.md, "DATA_DIR") file by file: the split
files against emails.jsonl and meta.json, no id, thread or duplicate body in two splits, nothing left over."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from seqlab.data.prepare.dedupe import normalize_body
from seqlab.data.tokenizer import load_tokenizer

SPLITS = ("train", "val", "test")
DATA_FILES = ({f"{s}.{ext}" for s in SPLITS for ext in ("bin", "idx", "ctx.bin", "ctx.idx")}
              | {"tokenizer.json", "emails.jsonl", "meta.json", "seen.bin", "sources.json"})


def read_split(data: Path, split: str, dtype: str) -> list[np.ndarray]:
    ids = np.fromfile(data / f"{split}.bin", dtype=np.dtype(dtype).newbyteorder("<"))
    starts = np.fromfile(data / f"{split}.idx", dtype="<i8")
    ends = [*starts[1:], len(ids)]
    return [ids[a:b] for a, b in zip(starts, ends)]


def check_data_dir(data: Path) -> tuple[dict, list[dict], dict[str, list[str]]]:
    """Check the DATA_DIR contract; return meta, the emails.jsonl rows and the decoded texts per split."""
    assert {p.name for p in data.iterdir()} == DATA_FILES  # no spool or temporary file left behind
    meta = json.loads((data / "meta.json").read_text(encoding="utf-8"))
    tok = load_tokenizer(data / "tokenizer.json")
    assert meta["tokenizer"]["kind"] == tok.kind
    assert meta["tokenizer"]["sha256"] == hashlib.sha256((data / "tokenizer.json").read_bytes()).hexdigest()
    assert isinstance(meta["seed"], int)
    duplicates = sum(meta["duplicates"].values())
    assert meta["seen"] == meta["kept"] + sum(meta["skipped"].values()) + duplicates
    rows = [json.loads(line) for line in (data / "emails.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == meta["kept"] == sum(meta["splits"][s]["emails"] for s in SPLITS)
    assert all(set(r) == {"id", "thread", "split", "source", "tokens"} for r in rows)
    texts: dict[str, list[str]] = {}
    for split in SPLITS:
        emails = read_split(data, split, meta["token_dtype"])
        mine = [r for r in rows if r["split"] == split]
        assert [len(e) for e in emails] == [r["tokens"] for r in mine]
        assert meta["splits"][split]["tokens"] == sum(len(e) for e in emails)
        assert meta["splits"][split]["threads"] == len({r["thread"] for r in mine})
        assert all(e[0] == tok.bos_id and e[-1] == tok.eos_id for e in emails)
        texts[split] = [tok.decode(e.tolist()) for e in emails]
        assert meta["splits"][split]["bytes"] == sum(len(t.encode("utf-8")) for t in texts[split])
    for key in ("id", "thread"):
        owners: dict[str, str] = {}
        for r in rows:
            assert owners.setdefault(r[key], r["split"]) == r["split"], f"{key} {r[key]} is in two splits"
    bodies: dict[str, str] = {}
    for split, items in texts.items():
        for text in items:
            body = normalize_body(text.partition("\n\n")[2])
            if len(body) >= 20:
                assert bodies.setdefault(body, split) == split, "a duplicate body is in two splits"
    return meta, rows, texts


def files_of(data: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(data.iterdir())}
