"""compare: model names, parameter matching (meta-device counts vs real builds, vs a brute-force search),
budgets, and one tiny end-to-end comparison with its report files, reuse of finished runs and refusal of
a different run in the same place."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from seqlab.config import RunConfig, apply_overrides, get_preset
from seqlab.errors import UserError
from seqlab.models import build_model
from seqlab.studies.compare.compare_runs import compare, format_table, run_status
from seqlab.studies.compare.plan import (
    DEFAULT_MODELS,
    PARAM_TOLERANCE,
    UNBOUNDED_STEPS,
    apply_budget,
    count_params,
    match_width,
    parse_models,
    plan_runs,
    reference_config,
    width_steps,
)
from seqlab.studies.recipes import apply_recipe

ROW_FIELDS = {"model", "mixer", "pos", "n_layer", "n_embd", "n_head", "params", "params_ratio", "steps", "tokens",
              "tokens_per_s", "train_s", "peak_mem_mb", "val_loss", "val_ppl", "val_bpb", "test_loss", "test_ppl",
              "test_bpb", "em1", "em2", "em3", "coverage", "threshold", "stopped", "reused", "run_dir"}


# ---------------------------------------------------------------- planning, no training


def test_default_models_matched_within_ten_percent_at_small() -> None:
    base = get_preset("small")
    plans = plan_runs(base, list(DEFAULT_MODELS))
    reference = build_model(reference_config(base)).num_params()  # a real build, not the meta count
    assert [p.name for p in plans] == list(DEFAULT_MODELS)
    widths = {}
    for p in plans:
        assert p.reference == reference
        assert p.params == build_model(p.cfg.model).num_params(), p.name  # meta count == real count
        assert abs(p.params / reference - 1) <= PARAM_TOLERANCE, (p.name, p.params, reference)
        assert p.matched
        widths[p.name] = p.cfg.model.n_embd
    # an RNN layer has fewer weights per width (2C^2) than attention (4C^2), a GRU more (6C^2): the
    # matched widths must order accordingly around the preset's width
    assert widths["rnn"] > base.model.n_embd > widths["gru"]
    assert widths["attn-rope"] == base.model.n_embd
    mixers = {p.name: (p.cfg.model.mixer, p.cfg.model.pos, p.cfg.model.n_head) for p in plans}
    assert mixers["attn1"] == ("attention", "rope", 1)
    assert mixers["attn-alibi"][:2] == ("attention", "alibi") and mixers["mingru"][:2] == ("mingru", "none")


@pytest.mark.parametrize("name", ["gru", "rnn", "attn-rope", "attn-learned"])
def test_match_width_agrees_with_brute_force(name: str) -> None:
    base = get_preset("tiny")
    reference = count_params(reference_config(base))
    cfg = apply_recipe(base, name).model
    chosen, params = match_width(cfg, reference)
    fine, _ = width_steps(cfg)
    errors = {w: abs(count_params(apply_overrides(RunConfig(model=cfg), [f"model.n_embd={w}"]).model) - reference)
              / reference for w in range(fine, 4 * cfg.n_embd, fine)}
    assert chosen.n_embd % fine == 0
    assert params == count_params(chosen)
    assert min(errors.values()) <= PARAM_TOLERANCE
    assert errors[chosen.n_embd] <= PARAM_TOLERANCE  # a width within 10% exists, so one was chosen


def test_parse_models_and_budgets() -> None:
    assert parse_models("gru, attn-rope,gru") == ["gru", "attn-rope"]
    assert parse_models(None) == list(DEFAULT_MODELS)
    for bad in ("transformer", "attn-fancy", " , "):
        with pytest.raises(UserError):
            parse_models(bad)
    tiny = get_preset("tiny")
    per_step = tiny.train.batch_size * tiny.model.block_size * tiny.train.grad_accum
    cfg, budget = apply_budget(tiny, minutes=None, tokens=10 * per_step + 1)
    assert cfg.train.max_steps == budget.max_steps == 11 and budget.tokens_per_step == per_step
    assert cfg.train.eval_every <= 11 // 10 + 1 and cfg.train.warmup_steps <= 1
    cfg, budget = apply_budget(tiny, minutes=0.5, tokens=None)
    assert cfg.train.max_minutes == 0.5 and cfg.train.max_steps == UNBOUNDED_STEPS and budget.kind == "minutes"
    cfg, budget = apply_budget(tiny, minutes=None, tokens=None)
    assert cfg.train.max_steps == tiny.train.max_steps and budget.kind == "steps"
    for kwargs in ({"minutes": 1.0, "tokens": 100}, {"minutes": 0.0, "tokens": None},
                   {"minutes": None, "tokens": 0}):
        with pytest.raises(UserError):
            apply_budget(tiny, **kwargs)
    with pytest.raises(UserError):
        apply_budget(tiny, minutes=None, tokens=1000, overrides=["train.max_steps=5"])


# ---------------------------------------------------------------- a tiny comparison end to end


@pytest.fixture(scope="module")
def tiny_compare(tiny_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict]:
    """compare(gru), then again with attn-rope added: (out, first results, second results)."""
    out = tmp_path_factory.mktemp("compare")
    kwargs = dict(preset="tiny", tokens=8 * 256, seed=0, progress=False, overrides=["train.threads=1"],
                  completion_emails=6)
    first = compare(tiny_data_dir, out, models=["gru"], **kwargs)
    mtimes = {"gru": (out / "runs" / "gru" / "model.safetensors").stat().st_mtime_ns}
    second = compare(tiny_data_dir, out, models=["gru", "attn-rope"], **kwargs)
    second["_mtimes_before"] = mtimes
    return out, first, second


def test_compare_writes_self_contained_report(tiny_compare: tuple[Path, dict, dict]) -> None:
    out, first, second = tiny_compare
    for name in ("report.md", "results.csv", "results.json", "report.html"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0
    page = (out / "report.html").read_text()
    assert "http://" not in page and "https://" not in page and "<script" not in page
    assert page.count("data:image/png;base64,") == 3
    saved = json.loads((out / "results.json").read_text())
    assert [r["model"] for r in saved["rows"]] == ["gru", "attn-rope"]
    for row in saved["rows"]:
        assert ROW_FIELDS <= set(row), ROW_FIELDS - set(row)
        assert row["steps"] == 8 and row["tokens"] > 0 and row["tokens_per_s"] > 0
        assert abs(row["params"] / saved["reference_params"] - 1) <= PARAM_TOLERANCE
        assert row["peak_mem_mb"] is not None and row["peak_mem_mb"] >= 0
        assert 0 < row["val_bpb"] < 9 and math.isclose(row["test_ppl"], math.exp(row["test_loss"]), rel_tol=1e-9)
        assert saved["curves"][row["model"]] and saved["curves"][row["model"]][-1][0] == 8
    assert 0 < saved["xz"]["val"] < 8 and 0 < saved["xz"]["test"] < 8
    csv_lines = (out / "results.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + 2 + 1 and csv_lines[-1].startswith("xz -9e")
    table = format_table(second)
    assert all(name in table for name in ("gru", "attn-rope", "xz -9e"))
    assert "| gru |" in (out / "report.md").read_text()


def test_compare_reuses_finished_runs(tiny_compare: tuple[Path, dict, dict]) -> None:
    out, first, second = tiny_compare
    assert [r["reused"] for r in first["rows"]] == [False]
    assert [r["reused"] for r in second["rows"]] == [True, False]
    for name, before in second["_mtimes_before"].items():
        assert (out / "runs" / name / "model.safetensors").stat().st_mtime_ns == before
    # the reused runs measure the same as when they were trained
    for a, b in zip(first["rows"], second["rows"]):
        assert a["model"] == b["model"] and a["val_bpb"] == b["val_bpb"] and a["peak_mem_mb"] == b["peak_mem_mb"]


def test_run_status_resume_and_refusal(tiny_compare: tuple[Path, dict, dict], tiny_data_dir: Path,
                                       tmp_path: Path) -> None:
    out, _, second = tiny_compare
    run = tmp_path / "gru"
    shutil.copytree(out / "runs" / "gru", run)
    cfg = RunConfig.from_dict(json.loads((run / "compare_request.json").read_text()))
    assert run_status(run, cfg, tiny_data_dir) == "finished"
    assert run_status(tmp_path / "absent", cfg, tiny_data_dir) == "new"
    info = json.loads((run / "run.json").read_text())
    info["summary"]["stopped"] = "stopped by SIGINT"
    (run / "run.json").write_text(json.dumps(info))
    assert run_status(run, cfg, tiny_data_dir) == "resume"
    with pytest.raises(UserError, match="another config"):
        run_status(run, apply_overrides(cfg, ["train.max_steps=9"]), tiny_data_dir)
    # compare itself refuses (and keeps the old run) when the budget changed
    with pytest.raises(UserError, match="another config"):
        compare(tiny_data_dir, out, preset="tiny", models=["gru"], tokens=9 * 256, progress=False,
                overrides=["train.threads=1"])
    assert (out / "runs" / "gru" / "model.safetensors").is_file()
