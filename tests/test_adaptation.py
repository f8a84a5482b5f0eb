"""Adapting to one person: `prepare --sender / --exclude-sender` (counted skips that partition the corpus)
and `train --init RUN_DIR0` (the new run starts from the init run's weights; another tokenizer or other
model settings are refused)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from preparing import prepare

from seqlab.cli.main import main
from seqlab.config import apply_overrides, get_preset
from seqlab.errors import UserError
from seqlab.runs.init import init_config
from seqlab.runs.load import load_run
from seqlab.training.trainer import Trainer

PERSON = "david.cohen@keystone-legal.example"


@pytest.fixture(scope="module")
def split_corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(all mail, one person's mail, everyone else's), from the same 400 synthetic messages."""
    root = tmp_path_factory.mktemp("people")
    kw = {"count": 400, "seed": 0, "split": (0.8, 0.1, 0.1), "progress": False, "workers": 1}
    prepare("synthetic", root / "all", **kw)
    prepare("synthetic", root / "person", senders=[PERSON.upper()], **kw)  # addresses compare case-folded
    prepare("synthetic", root / "rest", exclude_senders=[PERSON], **kw)
    return root / "all", root / "person", root / "rest"


def _meta(d: Path) -> dict:
    return json.loads((d / "meta.json").read_text())


def test_sender_filters_partition_the_corpus_with_counted_skips(split_corpus: tuple[Path, Path, Path]) -> None:
    everyone, person, rest = (_meta(d) for d in split_corpus)
    assert person["kept"] > 0 and rest["kept"] > 0
    assert person["kept"] + rest["kept"] == everyone["kept"]
    assert person["skipped"] == {"other_sender": rest["kept"]}
    assert rest["skipped"] == {"excluded_sender": person["kept"]}
    assert person["clean"]["senders"] == [PERSON] and "senders" not in everyone["clean"]
    assert person["seen"] == rest["seen"] == everyone["seen"]
    ids = [json.loads(line)["source"] for line in (split_corpus[1] / "emails.jsonl").read_text().splitlines()]
    assert len(ids) == person["kept"]


def test_no_mail_from_the_sender_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no usable email"):
        prepare("synthetic", tmp_path / "none", count=50, senders=["nobody@nowhere.example"], progress=False,
                workers=1)


@pytest.fixture(scope="module")
def general_run(split_corpus: tuple[Path, Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("general") / "run"
    cfg = apply_overrides(get_preset("tiny"), ["train.max_steps=6", "train.threads=1", "train.eval_every=3"])
    Trainer(split_corpus[2], run, cfg, progress=False).run()
    return run


def test_init_starts_from_the_init_runs_weights_with_a_fresh_optimizer(
        split_corpus: tuple[Path, Path, Path], general_run: Path, tmp_path: Path) -> None:
    cfg = init_config(general_run)
    trainer = Trainer(split_corpus[1], tmp_path / "adapted", cfg, overrides=["train.max_steps=2"],
                      progress=False, init=general_run)
    try:
        init_model, _, _ = load_run(general_run, "cpu")
        for (name, a), b in zip(trainer.model.state_dict().items(), init_model.state_dict().values()):
            assert torch.equal(a.cpu(), b), name
        assert not trainer.opt.state  # a fresh optimizer: no moments carried over
        assert trainer.progress.step == 0
        summary = trainer.run()
    finally:
        trainer.lock.release()
    assert summary["steps"] == 2
    # a fresh seed-0 model of the same config starts elsewhere: the init really changed the weights
    scratch = Trainer(split_corpus[1], tmp_path / "scratch", cfg, overrides=["train.max_steps=2"], progress=False)
    scratch.lock.release()
    assert not all(torch.equal(a, b) for a, b in zip(scratch.model.state_dict().values(),
                                                       init_model.state_dict().values()))


def test_init_with_another_tokenizer_is_refused_naming_both(general_run: Path, tmp_path: Path) -> None:
    bpe_data = tmp_path / "bpe"
    prepare("synthetic", bpe_data, count=60, tokenizer="bpe", vocab_size=300, progress=False, workers=1)
    with pytest.raises(UserError, match=r"another tokenizer \(byte, vocab 259.*\(bpe, vocab"):
        Trainer(bpe_data, tmp_path / "x", init_config(general_run), progress=False, init=general_run)


def test_init_refuses_model_changes_and_cli_combinations(split_corpus: tuple[Path, Path, Path], general_run: Path,
                                                         tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UserError, match="model settings come from --init"):
        Trainer(split_corpus[1], tmp_path / "wide", init_config(general_run), overrides=["model.n_embd=48"],
                progress=False, init=general_run)
    base = ["train", str(split_corpus[1]), "--out", str(tmp_path / "cli"), "--init", str(general_run)]
    assert main([*base, "--resume"]) == 2
    assert main([*base, "--preset", "tiny"]) == 2
    assert main(["train", str(split_corpus[1]), "--out", str(tmp_path / "y"), "--init", str(tmp_path / "no")]) == 2
    assert "not a run folder" in capsys.readouterr().err
    assert main([*base, "--quiet", "train.max_steps=2", "model.dropout=0.1"]) == 0  # dropout may change
    assert json.loads((tmp_path / "cli" / "config.json").read_text())["model"]["dropout"] == 0.1


def test_prepare_with_a_runs_bpe_tokenizer_lets_init_adapt_to_another_mailbox(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """BPE is fitted per DATA_DIR, so a BPE run cannot `--init` onto another mailbox's own BPE data (refused),
    but can onto that mailbox encoded with the run's tokenizer (`prepare --tokenizer-from RUN_DIR`)."""
    kw = {"count": 300, "seed": 0, "split": (0.8, 0.1, 0.1), "progress": False, "workers": 1}
    prepare("synthetic", tmp_path / "rest", tokenizer="bpe", vocab_size=300, exclude_senders=[PERSON], **kw)
    run = tmp_path / "general"
    cfg = apply_overrides(get_preset("tiny"), ["train.max_steps=4", "train.threads=1", "train.eval_every=2"])
    Trainer(tmp_path / "rest", run, cfg, progress=False).run()
    prepare("synthetic", tmp_path / "own", tokenizer="bpe", vocab_size=300, senders=[PERSON], **kw)
    assert main(["prepare", "synthetic", "--out", str(tmp_path / "shared"), "--tokenizer-from", str(run),
                 "--count", "300", "--split", "0.8,0.1,0.1", "--sender", PERSON, "--workers", "1", "--quiet"]) == 0
    shared, own = _meta(tmp_path / "shared"), _meta(tmp_path / "own")
    assert shared["tokenizer"]["from"] == str(run / "tokenizer.json") and "from" not in own["tokenizer"]
    assert (tmp_path / "shared" / "tokenizer.json").read_bytes() == (run / "tokenizer.json").read_bytes()
    assert shared["kept"] == own["kept"] and shared["tokenizer"]["sha256"] != own["tokenizer"]["sha256"]
    base = ["train", "--init", str(run), "--quiet", "train.max_steps=2", "train.threads=1"]
    capsys.readouterr()
    assert main([*base[:1], str(tmp_path / "own"), "--out", str(tmp_path / "a"), *base[1:]]) == 2
    assert "another tokenizer" in capsys.readouterr().err
    assert main([*base[:1], str(tmp_path / "shared"), "--out", str(tmp_path / "b"), *base[1:]]) == 0
    # bad uses are sentences (exit 2) before any mail is read
    out = ["prepare", "synthetic", "--out", str(tmp_path / "x"), "--count", "20", "--quiet", "--tokenizer-from"]
    assert main([*out, str(tmp_path / "nowhere")]) == 2
    assert main([*out, str(tmp_path)]) == 2  # a folder without tokenizer.json
    assert main([*out, str(run), "--tokenizer", "byte"]) == 2
    assert main([*out, str(run / "tokenizer.json"), "--vocab-size", "512"]) == 2
    assert main([*out, str(run / "tokenizer.json"), "--tokenizer", "bpe", "--vocab-size", "300"]) == 0
    assert not (tmp_path / "nowhere").exists()
