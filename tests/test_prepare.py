"""`seqlab prepare` end to end: every source kind through the CLI, the DATA_DIR contract checked file by file
(data_dir_checks.py), the options, byte-identical reruns, and user errors (exit 2, one sentence, no
traceback). The pieces of the one pass (worker pool, spool, fast path): test_prepare_pipeline.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from data_dir_checks import SPLITS, check_data_dir, files_of
from mail_samples import ENVELOPE, corpus_messages
from preparing import prepare

from seqlab.cli.main import main as cli_main

# the fixtures `layouts` and `hostile_tree`
pytest_plugins = ("prepare_fixtures",)


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


def test_hostile_directory_is_fully_accounted_for(hostile_tree: Path, tmp_path: Path) -> None:
    assert run_cli(str(hostile_tree), "--out", str(tmp_path / "data")) == 0
    meta, _, _ = check_data_dir(tmp_path / "data")
    files = sum(1 for p in hostile_tree.rglob("*") if p.is_file())
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
