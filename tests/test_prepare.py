"""`seqlab prepare` end to end: every source kind through the CLI, the DATA_DIR contract checked file by file,
split guarantees read back from emails.jsonl and the token store, byte-identical reruns, workers=1 against a
worker pool (and a pool whose worker dies), the byte fast path against `Tokenizer.encode_email`, the spool
format, slimmed thread metadata against the full one, and user errors (exit 2, one sentence, no traceback).
"""

from __future__ import annotations

import csv
import hashlib
import json
import mailbox
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hostile_mail import write_hostile_corpus, write_many_malformed
from hypothesis import given, settings
from hypothesis import strategies as st

from seqlab.cli.main import main as cli_main
from seqlab.data.mail import workers as parallel
from seqlab.data.mail.corpus import ThreadMeta, assign_threads, normalize_body
from seqlab.data.mail.reader import CleanOptions, parse_message
from seqlab.data.mail.records import Email
from seqlab.data.mail.spool import SpoolWriter, iter_spool, pack_record
from seqlab.data.prepare import encode_texts, prepare
from seqlab.data.synthetic.generator import synthetic_messages
from seqlab.data.tokenizer import ByteTokenizer, clean_text, fit_tokenizer, load_tokenizer
from seqlab.errors import UserError

SPLITS = ("train", "val", "test")
DATA_FILES = {f"{s}.{ext}" for s in SPLITS for ext in ("bin", "idx")} | {"tokenizer.json", "emails.jsonl", "meta.json"}
ENVELOPE = b"From sender@example.com Mon Jan  8 09:00:00 2024\n"


# ---------------------------------------------------------------- a small corpus in every layout


def _message(mid: str, subject: str, body: str, sender: str = "Dana Ortiz <dana@harbour.example>") -> bytes:
    return (f"From: {sender}\nTo: Lee Park <lee@harbour.example>\nSubject: {subject}\nMessage-ID: <{mid}>\n"
            f"Date: Tue, 9 Jan 2024 10:00:00 +0000\n\n{body}\n").encode()


def corpus_messages() -> list[bytes]:
    """40 synthetic messages (threads with quotes), two kinds of duplicate, and one message full of PII."""
    msgs = [raw for _, raw in synthetic_messages(count=40, seed=3)]
    body = "Please move the budget review to Thursday; the auditors need the ledger first. Thanks, Dana"
    msgs.append(_message("dup-a@x", "Budget review", body))
    msgs.append(_message("dup-b@x", "Budget review", body))  # exact duplicate: same sender, subject, body
    msgs.append(_message("dup-c@x", "Re: something else", body, sender="kim@harbour.example"))  # same body
    msgs.append(_message("pii@x", "Contact details", "Write to carol.white@example.com or call +1 555 123 4567, "
                         "and see https://intranet.example.com/plan for the plan."))
    return msgs


def write_mbox(path: Path, msgs: list[bytes]) -> Path:
    with open(path, "wb") as f:
        for raw in msgs:
            f.write(ENVELOPE + raw.replace(b"\nFrom ", b"\n>From ").rstrip(b"\n") + b"\n\n")
    return path


def write_layouts(root: Path, msgs: list[bytes]) -> dict[str, Path]:
    """The same messages as an mbox, a Maildir, an .eml tree, an Enron tree and a Kaggle CSV; one file.

    Every layout lists the messages in the same order (which copy of a duplicate is kept depends on it).
    """
    paths = {"mbox": write_mbox(root / "mail.mbox", msgs)}
    md = mailbox.Maildir(root / "Maildir", create=True)
    md.add_folder("Archive")
    for i, raw in enumerate(msgs):
        # Written by hand so the unique names sort in input order; the last messages in a subfolder.
        folder = root / "Maildir" / ("cur" if i < 30 else ".Archive/cur")
        (folder / f"{i:04d}.test.host:2,S").write_bytes(raw)
    paths["maildir"] = root / "Maildir"
    for i, raw in enumerate(msgs):
        folder = root / "eml" / f"{i // 15}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:03d}.eml").write_bytes(raw)
        # Enron: maildir/<user>/<folder>/<n>. with CRLF line ends; at most 9 files a folder, so "10." never
        # sorts before "2.".
        enron = root / "enron" / "maildir" / f"user{i // 22}" / ("a_inbox", "b_sent", "c_notes")[(i % 22) // 9]
        enron.mkdir(parents=True, exist_ok=True)
        (enron / f"{i % 9 + 1}.").write_bytes(raw.replace(b"\n", b"\r\n"))
    paths["tree"], paths["enron"] = root / "eml", root / "enron"
    with open(root / "emails.csv", "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["file", "message"])
        for i, raw in enumerate(msgs):
            writer.writerow([f"user/inbox/{i}.", raw.decode("utf-8")])
    paths["csv"] = root / "emails.csv"
    paths["message"] = root / "one.eml"
    paths["message"].write_bytes(msgs[-1])
    return paths


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_layouts(tmp_path_factory.mktemp("mail"), corpus_messages())


@pytest.fixture(scope="module")
def hostile_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    write_hostile_corpus(root / "kinds")
    write_many_malformed(root / "damaged", n=150)
    return root


# ---------------------------------------------------------------- reading a DATA_DIR back


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


def run_cli(*args: str) -> int:
    return cli_main(["prepare", *args, "--quiet"])


# ---------------------------------------------------------------- every source kind through the CLI


@pytest.mark.parametrize("kind", ["mbox", "maildir", "tree", "enron", "csv"])
def test_each_layout_gives_the_same_emails(kind: str, layouts: dict[str, Path], tmp_path: Path) -> None:
    assert run_cli(str(layouts[kind]), "--out", str(tmp_path / "data")) == 0
    meta, rows, texts = check_data_dir(tmp_path / "data")
    assert meta["seen"] == 44 and meta["duplicates"] == {"duplicate": 1, "duplicate_body": 1}
    assert meta["kept"] == 42 and sum(meta["skipped"].values()) == 0
    reference = tmp_path / "reference"
    prepare(str(layouts["mbox"]), reference, progress=False, workers=1)
    # The order differs between layouts (Maildir keys are random), the set of training texts does not.
    all_texts = sorted(t for split in SPLITS for t in texts[split])
    assert all_texts == sorted(t for split in SPLITS for t in check_data_dir(reference)[2][split])
    assert len({r["source"] for r in rows}) == len(rows)


def test_single_message_and_synthetic_sources(layouts: dict[str, Path], tmp_path: Path) -> None:
    assert run_cli(str(layouts["message"]), "--out", str(tmp_path / "one"), "--split", "1,0,0") == 0
    meta, _, texts = check_data_dir(tmp_path / "one")
    assert (meta["seen"], meta["kept"]) == (1, 1) and texts["train"][0].startswith("Contact details\n\n")
    assert run_cli("synthetic", "--count", "60", "--seed", "5", "--out", str(tmp_path / "syn")) == 0
    meta, _, _ = check_data_dir(tmp_path / "syn")
    assert meta["seen"] == 60 and meta["seed"] == 5 and meta["kept"] > 50


def test_hostile_directory_is_fully_accounted_for(hostile_dir: Path, tmp_path: Path) -> None:
    assert run_cli(str(hostile_dir), "--out", str(tmp_path / "data")) == 0
    meta, _, _ = check_data_dir(tmp_path / "data")
    files = sum(1 for p in hostile_dir.rglob("*") if p.is_file())
    assert meta["seen"] == files  # every file is seen once: kept, skipped by reason, or a duplicate
    assert meta["kept"] > 0 and {"hidden_file", "not_mail_file", "empty"} <= set(meta["skipped"])


def test_spamassassin_from_a_local_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The named source without the network: SEQLAB_SPAMASSASSIN points at an extracted package folder."""
    msgs = corpus_messages()
    for g, group in enumerate(("easy-ham-1", "easy-ham-2", "hard-ham-1")):
        folder = tmp_path / "package" / "data" / group
        folder.mkdir(parents=True)
        for i, raw in enumerate(msgs[g::3]):
            (folder / f"{i:05d}.{g}abc.txt").write_bytes(ENVELOPE + raw)
    monkeypatch.setenv("SEQLAB_SPAMASSASSIN", str(tmp_path / "package"))
    out = tmp_path / "data"
    assert run_cli("spamassassin", "--out", str(out), "--cache-dir", str(tmp_path / "cache")) == 0
    meta, _, _ = check_data_dir(out)
    assert meta["seen"] == len(msgs) and meta["kept"] == 42


# ---------------------------------------------------------------- options


def test_limit_through_the_command_line(layouts: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "data"
    r = subprocess.run([sys.executable, "-m", "seqlab", "prepare", str(layouts["mbox"]), "--out", str(out),
                        "--limit", "10", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "messages seen: 10" in r.stdout
    meta, rows, _ = check_data_dir(out)
    assert meta["seen"] == 10 and len(rows) == meta["kept"] <= 10


def test_mask_pii_removes_addresses_from_the_stored_text(layouts: dict[str, Path], tmp_path: Path) -> None:
    def all_text(data: Path) -> str:
        return "\n".join(t for split in SPLITS for t in check_data_dir(data)[2][split])

    assert run_cli(str(layouts["mbox"]), "--out", str(tmp_path / "plain")) == 0
    assert run_cli(str(layouts["mbox"]), "--out", str(tmp_path / "masked"), "--mask-pii") == 0
    plain, masked = all_text(tmp_path / "plain"), all_text(tmp_path / "masked")
    assert "carol.white@example.com" in plain and "555 123 4567" in plain  # the test can fail
    assert "@" not in masked and "555 123 4567" not in masked and "intranet.example.com" not in masked
    assert "<EMAIL>" in masked and "<PHONE>" in masked and "<URL>" in masked


def test_bpe_stores_the_same_texts_as_bytes(layouts: dict[str, Path], tmp_path: Path) -> None:
    prepare(str(layouts["mbox"]), tmp_path / "byte", progress=False)
    assert run_cli(str(layouts["mbox"]), "--out", str(tmp_path / "bpe"), "--tokenizer", "bpe",
                   "--vocab-size", "400") == 0
    meta, rows, texts = check_data_dir(tmp_path / "bpe")
    assert meta["tokenizer"]["kind"] == "bpe" and 259 < meta["tokenizer"]["vocab_size"] <= 400
    byte_meta, byte_rows, byte_texts = check_data_dir(tmp_path / "byte")
    assert texts == byte_texts and [r["id"] for r in rows] == [r["id"] for r in byte_rows]
    assert meta["splits"]["train"]["tokens"] < byte_meta["splits"]["train"]["tokens"]  # BPE merges something


def test_same_input_and_seed_give_identical_files(layouts: dict[str, Path], tmp_path: Path) -> None:
    for name in ("a", "b"):
        prepare(str(layouts["tree"]), tmp_path / name, seed=7, progress=False)
    assert files_of(tmp_path / "a") == files_of(tmp_path / "b")
    prepare(str(layouts["tree"]), tmp_path / "c", seed=8, progress=False)
    assert files_of(tmp_path / "c")["meta.json"] != files_of(tmp_path / "a")["meta.json"]


# ---------------------------------------------------------------- workers


@pytest.fixture
def tiny_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Use the pool even for a few dozen messages, in many chunks, so several are in flight at once."""
    monkeypatch.setattr(parallel, "POOL_MIN_MESSAGES", 0)
    monkeypatch.setattr(parallel, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "CHUNK_MESSAGES", 7)


@pytest.mark.parametrize("source", ["mbox", "hostile"])
def test_workers_give_byte_identical_output(source: str, layouts: dict[str, Path], hostile_dir: Path,
                                            tmp_path: Path, tiny_chunks: None,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = hostile_dir if source == "hostile" else layouts["mbox"]
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


def test_slim_metadata_gives_the_same_threads() -> None:
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
    assert full == assign_threads([parallel.slim_meta(m) for m in metas])
    h = full[-len(headerless):]
    assert h[0] == h[1] != h[2] and h[3] != h[4] and h[5] == h[6] != h[0]  # the joins the slim form must keep
    assert len(set(full[:80])) < 80  # replies among the synthetic mail joined their threads too


# ---------------------------------------------------------------- user errors


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "seqlab", "prepare", *args, "--quiet"], capture_output=True,
                          text=True)


def test_bad_input_exits_2_with_one_sentence(tmp_path: Path, layouts: dict[str, Path]) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "a_file").write_text("not a folder")
    cases = [
        ([str(tmp_path / "missing.mbox"), "--out", str(tmp_path / "o1")], "does not exist"),
        ([str(tmp_path / "empty"), "--out", str(tmp_path / "o2")], "no mail files"),
        ([str(layouts["mbox"]), "--out", str(tmp_path / "a_file" / "data")], "cannot be created"),
        ([str(layouts["mbox"]), "--out", str(tmp_path / "a_file")], "not a directory"),
    ]
    for args, words in cases:
        r = _cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("seqlab: error:") and words in lines[0], r.stderr
        assert "Traceback" not in r.stderr and r.stdout == ""
