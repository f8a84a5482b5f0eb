"""The batched encode stage of `prepare` (seqlab/data/prepare/encode.py: a chunk's emails per split at once,
`TokenWriter.add_flat`, `index_line`) against the per-email loop it replaced (kept below): the same
DATA_DIR, byte for byte, with the byte tokenizer and with BPE; and each piece against its reference."""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path

import numpy as np
import pytest
from hostile_mail import write_hostile_tree
from hypothesis import given, settings
from hypothesis import strategies as st
from mail_samples import corpus_messages, write_mbox
from preparing import prepare

from seqlab.data.prepare import encode
from seqlab.data.prepare.spool import iter_spool
from seqlab.data.prepare.token_files import TokenWriter
from seqlab.data.tokenizer import ByteTokenizer


def slow_encode_into(spool, writers, index, tok, threads, splits, counts, progress) -> None:  # noqa: ANN001
    """encode.encode_into as it was: one email at a time through TokenWriter.add and json.dumps."""
    records = iter_spool(spool)
    i = 0
    while True:
        chunk = list(islice(records, encode.ENCODE_CHUNK))
        if not chunk:
            break
        lines = []
        for rec, ids in zip(chunk, encode.encode_texts(tok, [r.text for r in chunk])):
            split, thread = splits[i], threads[i]
            writers[split].add(ids)
            c = counts[split]
            c["emails"] += 1
            c["tokens"] += len(ids)
            c["bytes"] += len(rec.text)
            lines.append(json.dumps({"id": rec.id, "thread": thread, "split": split, "source": rec.source,
                                     "tokens": len(ids)}, ensure_ascii=False) + "\n")
            i += 1
        index.write("".join(lines).encode("utf-8"))


@pytest.mark.parametrize("tokenizer", ["byte", "bpe"])
def test_prepare_writes_the_same_data_dir_as_the_per_email_loop(tmp_path: Path, tokenizer: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    raws = [] if tokenizer == "bpe" else [  # (BPE on the hostile mail takes minutes: its texts are long)
        p.read_bytes() for p in sorted(write_hostile_tree(tmp_path / "tree", damaged=30).rglob("*")) if p.is_file()]
    box = write_mbox(tmp_path / "all.mbox", corpus_messages() * 3 + raws)  # more emails than one chunk's worth
    monkeypatch.setattr(encode, "ENCODE_CHUNK", 16)  # many chunks, some without a val or test email
    opts = {"tokenizer": tokenizer, "vocab_size": 300, "split": (0.6, 0.2, 0.2), "progress": False, "workers": 1}
    prepare(str(box), tmp_path / "fast", **opts)
    monkeypatch.setattr(encode, "encode_into", slow_encode_into)
    prepare(str(box), tmp_path / "slow", **opts)
    names = sorted(p.name for p in (tmp_path / "fast").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "slow").iterdir()) and "test.idx" in names
    for name in names:
        assert (tmp_path / "fast" / name).read_bytes() == (tmp_path / "slow" / name).read_bytes(), name


@settings(max_examples=300, deadline=None)
@given(st.text(), st.text(), st.sampled_from(["train", "val", "test"]), st.text(), st.integers(2, 10**9))
def test_index_line_is_json_dumps(ident: str, thread: str, split: str, source: str, tokens: int) -> None:
    expected = json.dumps({"id": ident, "thread": thread, "split": split, "source": source, "tokens": tokens},
                          ensure_ascii=False) + "\n"
    assert encode.index_line(ident, thread, split, source, tokens) == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=12))
def test_encode_flat_is_encode_texts_end_to_end(texts: list[bytes]) -> None:
    tok = ByteTokenizer()
    flat, lengths = encode.encode_flat(tok, texts)
    each = encode.encode_texts(tok, texts)
    assert np.array_equal(flat, np.concatenate(each)) and lengths.tolist() == [len(a) for a in each]


@pytest.mark.parametrize("vocab", [259, 70_000])
def test_add_flat_writes_what_add_writes(tmp_path: Path, vocab: int) -> None:
    rng = np.random.default_rng(0)
    emails = [rng.integers(0, vocab, size=n) for n in (3, 1, 7, 2, 5)]
    with TokenWriter(tmp_path / "a", "train", vocab) as a:
        for ids in emails:
            a.add(ids)
    with TokenWriter(tmp_path / "b", "train", vocab) as b:
        b.add_flat(np.concatenate(emails[:2]), np.array([3, 1]))
        b.add_flat(np.concatenate(emails[2:]), np.array([7, 2, 5]))
    for name in ("train.bin", "train.idx"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    with TokenWriter(tmp_path / "c", "train", vocab) as c, pytest.raises(ValueError):
        c.add_flat(np.array([1, vocab]), np.array([2]))
