"""The studies that chose defaults, run as maintained tools from the package: `seqlab.studies.equal_time`
(steps at equal quiet time), `recipe_study` (the training recipe) and `tokenizer_study` (bytes against BPE).
A few steps on tiny data: the commands run end to end and write their tables; no wall-clock thresholds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqlab.config import get_preset
from seqlab.studies import equal_time, recipe_study, tokenizer_study
from seqlab.studies.recipes import apply_recipe


def test_equal_time_steps_follow_the_rates() -> None:
    rates = {"ref": {"steps_per_s": 2.0, "tokens_per_step": 100.0},
             "half": {"steps_per_s": 1.0, "tokens_per_step": 100.0}}
    # the reference at 1,000 tokens/s is 10 steps/s: 600 steps a minute, and a model half as fast gets half
    assert equal_time.equal_time_steps(rates, 1.0, 1000.0, "ref") == {"ref": 600, "half": 300}
    assert equal_time.reference_tokens_per_s(rates, "ref", None) == 200.0  # measured: its fastest round
    assert equal_time.reference_tokens_per_s(rates, "ref", 1000.0) == 1000.0
    with pytest.raises(ValueError):
        equal_time.reference_tokens_per_s(rates, "ref", 0.0)


def test_step_rates_times_each_model() -> None:
    tiny = get_preset("tiny")
    configs = {"attn": apply_recipe(tiny, "attn-rope", []), "gru": apply_recipe(tiny, "gru", [])}
    rates = equal_time.step_rates(configs, threads=1, rounds=1, steps=1)
    assert set(rates) == {"attn", "gru"}
    for name, r in rates.items():
        cfg = configs[name]
        assert r["steps_per_s"] > 0 and r["flops_per_token"] > 0
        assert r["tokens_per_step"] == cfg.train.batch_size * cfg.model.block_size


def test_recipe_study_at_equal_tokens(tiny_data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "recipe"
    # 2,048 token positions: one step of the small preset's 16 x 128
    assert recipe_study.main([str(tiny_data_dir), "--out", str(out), "--only", "schedule", "--tokens", "2048",
                              "--jobs", "1"]) == 0
    table = (out / "table.md").read_text()
    assert "| schedule | attn | (baseline) |" in table and "| schedule | attn-wsd | train.schedule=wsd |" in table
    result = json.loads((out / "results" / "attn-wsd.json").read_text())
    assert result["steps"] == 1 and result["val_bpb"] > 0


def test_recipe_study_at_equal_time_with_a_given_rate(tiny_data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "recipe"
    # 0.002 minutes at 20,000 tokens/s: 2,400 tokens, one or two steps for each variant
    assert recipe_study.main([str(tiny_data_dir), "--out", str(out), "--only", "qk_norm", "--jobs", "1",
                              "--minutes", "0.002", "--ref-tokens-per-s", "20000"]) == 0
    kept = json.loads((out / "results-0.002min" / "rates.json").read_text())
    assert kept["ref_tokens_per_s"] == 20000 and kept["ref_rate_given"] is True
    assert kept["steps"]["attn"] == 1  # 2,400 tokens / 2,048 per step, rounded
    assert "anchored at attn's quiet 20,000 tokens/s, given" in (out / "results-0.002min" / "table.md").read_text()


def test_tokenizer_study_bytes_against_bpe(tmp_path: Path) -> None:
    from seqlab.bench.prepare_corpora import write_corpus

    mbox = write_corpus(tmp_path / "mail", [120], 0)["mbox-120"]
    out = tmp_path / "tokenizers"
    assert tokenizer_study.main([str(mbox), "--out", str(out), "--vocabs", "byte,300", "--families", "attention",
                                 "--bytes", "4000", "--jobs", "1"]) == 0
    table = (out / "table.md").read_text()
    assert "| attention | byte |" in table and "| attention | bpe300 |" in table
    assert (out / "data" / "bpe300" / "meta.json").is_file()
