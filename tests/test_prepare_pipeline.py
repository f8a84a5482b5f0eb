"""The pieces of `prepare`'s one pass: a worker pool gives byte-identical output to workers=1 (also when a
worker dies), small inputs stay in process, the thread links the workers send back (digests) join the same
threads as the full metadata, the spool format round-trips, and the byte fast path equals `encode_email`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from data_dir_checks import check_data_dir, files_of
from hypothesis import given, settings
from hypothesis import strategies as st
from preparing import prepare
from slow_threads import assign_threads

from seqlab.data.mail.reader import CleanOptions, parse_message
from seqlab.data.mail.records import Email
from seqlab.data.prepare import workers as parallel
from seqlab.data.prepare.encode import encode_texts
from seqlab.data.prepare.spool import SpoolWriter, iter_spool, pack_record
from seqlab.data.prepare.thread_keys import ThreadMeta
from seqlab.data.prepare.threadtable import ThreadTable, thread_links
from seqlab.data.prepare.tokenizer_fit import fit_tokenizer
from seqlab.data.synthetic.generator import synthetic_messages
from seqlab.data.tokenizer import ByteTokenizer, clean_text
from seqlab.errors import UserError

# the fixtures `layouts` and `hostile_tree`
pytest_plugins = ("prepare_fixtures",)


# ---------------------------------------------------------------- workers


@pytest.fixture
def tiny_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Use the pool even for a few dozen messages, in many chunks, so several are in flight at once."""
    monkeypatch.setattr(parallel, "POOL_MIN_MESSAGES", 0)
    monkeypatch.setattr(parallel, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "CHUNK_MESSAGES", 7)


@pytest.mark.parametrize("source", ["mbox", "hostile"])
def test_workers_give_byte_identical_output(source: str, layouts: dict[str, Path], hostile_tree: Path,
                                            tmp_path: Path, tiny_chunks: None,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = hostile_tree if source == "hostile" else layouts["mbox"]
    stats1: dict = {}
    stats2: dict = {}
    prepare(str(path), tmp_path / "w1", workers=1, progress=False, stats=stats1)
    prepare(str(path), tmp_path / "w2", workers=2, progress=True, stats=stats2)
    assert (stats1["workers_used"], stats2["workers_used"], stats2["pool_fallback"]) == (1, 2, False)
    assert files_of(tmp_path / "w1") == files_of(tmp_path / "w2")
    check_data_dir(tmp_path / "w2")
    err = capsys.readouterr().err
    assert "reading mail" in err and "encoding" in err  # the progress bars still draw with workers


_PARENT = os.getpid()
_parse_chunk = parallel.parse_chunk


def _dies_in_a_worker(chunk: list, opts: CleanOptions) -> list:
    if os.getpid() != _PARENT:
        os._exit(3)  # a worker killed mid-run, as by the OOM killer
    return _parse_chunk(chunk, opts)


def test_a_broken_pool_falls_back_to_in_process(layouts: dict[str, Path], tmp_path: Path, tiny_chunks: None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    prepare(str(layouts["mbox"]), tmp_path / "w1", workers=1, progress=False)
    monkeypatch.setattr(parallel, "parse_chunk", _dies_in_a_worker)
    stats: dict = {}
    prepare(str(layouts["mbox"]), tmp_path / "w2", workers=2, progress=False, stats=stats)
    assert stats["pool_fallback"] is True
    assert files_of(tmp_path / "w1") == files_of(tmp_path / "w2")


def test_small_inputs_stay_in_process(layouts: dict[str, Path], tmp_path: Path) -> None:
    stats: dict = {}
    prepare(str(layouts["mbox"]), tmp_path / "d", workers=2, progress=False, stats=stats)
    assert stats["workers_used"] == 1 and stats["raw_bytes"] > 0 and stats["messages"] == 44
    with pytest.raises(UserError, match="workers"):
        prepare(str(layouts["mbox"]), tmp_path / "e", workers=0, progress=False)


# ---------------------------------------------------------------- pieces: fast path, spool, slim metadata


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=6))
def test_byte_fast_path_equals_encode_email(texts: list[str]) -> None:
    tok = ByteTokenizer()
    got = encode_texts(tok, [clean_text(t).encode("utf-8") for t in texts])
    assert [g.tolist() for g in got] == [tok.encode_email(t) for t in texts]


def test_bpe_encode_texts_equals_encode_email() -> None:
    texts = ["Quarterly report attached.", "Grüße aus Köln — see you 🙂", "", "<|eos|> is plain text here"]
    tok = fit_tokenizer("bpe", texts * 20, vocab_size=300)
    got = encode_texts(tok, [t.encode("utf-8") for t in texts])
    assert [g.tolist() for g in got] == [tok.encode_email(t) for t in texts]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=20), st.text(max_size=20), st.text(max_size=60)), max_size=5))
def test_spool_round_trip(tmp_path_factory: pytest.TempPathFactory, records: list[tuple[str, str, str]]) -> None:
    path = tmp_path_factory.mktemp("spool") / "s"
    emails = [Email(id=i, thread=i, subject=s, body=b, source="src:" + i) for i, s, b in records]
    with SpoolWriter(path) as w:
        for e in emails:
            w.write(pack_record(e))
    back = list(iter_spool(path))
    assert [(r.id, r.source, r.text) for r in back] == [
        (clean_text(e.id), clean_text(e.source), clean_text(e.text()).encode("utf-8")) for e in emails]


def test_thread_links_give_the_same_threads(tmp_path: Path) -> None:
    opts = CleanOptions()
    emails = [parse_message(raw, label, opts) for label, raw in synthetic_messages(count=80, seed=11)]
    # Header-less mail (no Message-ID, In-Reply-To, References): joined by subject + participants only.
    headerless = [("a@x", "b@x", "Lunch plans"), ("b@x", "a@x", "Re: Lunch plans"), ("a@x", "c@x", "Lunch plans"),
                  ("a@x", "b@x", ""), ("b@x", "a@x", ""), ("a@x", "b@x, c@x", "Budget"),
                  ("c@x", "b@x, a@x", "RE: Budget")]
    for i, (sender, to, subject) in enumerate(headerless):
        raw = f"From: {sender}\nTo: {to}\nSubject: {subject}\n\nbody number {i}\n".encode()
        emails.append(parse_message(raw, f"h{i}", opts))
    metas = [ThreadMeta.from_email(e) for e in emails if isinstance(e, Email)]
    full = assign_threads(metas)
    table = ThreadTable(tmp_path / "names")
    for m in metas:
        table.add(thread_links(m))
    assignment = table.finish(0, (0.9, 0.05, 0.05))
    assert full == list(assignment.threads)
    assignment.close()
    h = full[-len(headerless):]
    assert h[0] == h[1] != h[2] and h[3] != h[4] and h[5] == h[6] != h[0]  # the joins the links must keep
    assert len(set(full[:80])) < 80  # replies among the synthetic mail joined their threads too
