"""The demo shows what a writer would see: a completion only when its confidence reaches the run's
calibrated threshold (calibration.json), and its table reads ExactMatch at 10% and 50% coverage."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from seqlab.evaluation.calibration import calibrate_run, load_calibration
from seqlab.evaluation.report import evaluate_run
from seqlab.generation.complete import complete, split_words
from seqlab.options import CalibrateOptions, EvalOptions
from seqlab.runs.load import load_run
from seqlab.studies.demo import (
    COVERAGE,
    LOW_COVERAGE,
    OPENINGS,
    describe_completion,
    format_table,
    sample_completions,
    table_row,
)


def test_completions_are_shown_only_at_the_calibrated_threshold(word_run_dir: Path, tiny_data_dir: Path,
                                                                 tmp_path: Path) -> None:
    run = Path(shutil.copytree(word_run_dir, tmp_path / "run"))
    calibrate_run(run, CalibrateOptions(data=tiny_data_dir, split="val", coverage=0.5, emails=6))
    threshold = load_calibration(run)["threshold"]
    items = sample_completions(run)
    assert len(items) == 3 * len(OPENINGS)
    model, tok, _ = load_run(run, "cpu")
    for c in items:
        assert c["threshold"] == round(threshold, 4)
        if c["how"] == "greedy":  # recomputed on its own: shown exactly when it reaches the threshold, cut
            # after its last word whose prefix still reaches it (what the server shows)
            full = complete(model, tok, c["prompt"], max_words=6)
            assert round(full.confidence, 3) == c["confidence"]
            assert c["shown"] == (bool(full.text) and full.confidence >= threshold)
            sure = sum(q >= threshold for q in full.word_confidences)
            shown = split_words(c["completion"])
            assert shown == (full.words[:sure] if c["shown"] else []) and full.text.startswith(c["completion"])
            assert c["unsure"] == (bool(full.words) and full.confidence < threshold)
        assert ("withheld" in describe_completion(c)) != c["shown"]
    assert any(c["shown"] for c in items) or all(c["confidence"] < threshold for c in items)


def test_the_table_reads_exact_match_at_ten_and_fifty_percent(word_run_dir: Path, tiny_data_dir: Path) -> None:
    test = evaluate_run(word_run_dir, EvalOptions(data=tiny_data_dir, split="test", completion_emails=6,
                                                  coverages=(LOW_COVERAGE, COVERAGE)), "cpu")
    summary = {"params": 1, "tokens_per_s": 1.0, "steps": 1}
    row = table_row("attention", summary, {"bpb": 1.0}, test)
    low, mid = test["by_coverage"]
    assert row["em1_10"] == low["exact_match"]["1"] and row["em3"] == mid["exact_match"]["3"]
    assert row["positions"] == test["completion_positions"]
    table = format_table([row])
    assert "EM@1 10%" in table and "EM@3 50%" in table


def test_the_demo_reuses_a_corpus_only_with_its_own_tokenizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo trains on BPE (demo.TOKENIZER, VOCAB_SIZE): a prepared folder with that tokenizer is reused
    as it is, one prepared with bytes is prepared again with the demo's tokenizer."""
    from preparing import prepare

    from seqlab.studies import demo

    bpe, byte = tmp_path / "bpe", tmp_path / "byte"
    prepare("synthetic", bpe, tokenizer=demo.TOKENIZER, vocab_size=demo.VOCAB_SIZE, count=200, progress=False,
            workers=1)
    prepare("synthetic", byte, count=200, progress=False, workers=1)
    calls = []
    monkeypatch.setattr(demo, "prepare", lambda config, out, **kw: calls.append((config, out)) or {})
    monkeypatch.setattr(demo, "format_report", lambda meta: "")
    assert demo._prepare("synthetic", bpe, False)["tokenizer"]["sha256"] == demo.load_meta(bpe)["tokenizer"]["sha256"]
    assert calls == []
    demo._prepare("synthetic", byte, False)
    assert [(c.source, o, c.tokenizer, c.vocab_size) for c, o in calls] == [
        ("synthetic", byte, demo.TOKENIZER, demo.VOCAB_SIZE)]
