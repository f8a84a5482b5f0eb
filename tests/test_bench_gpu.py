"""The prepared GPU check (`seqlab bench --only gpu`, seqlab/bench/gpu.py) on a CPU.

The same code path as on a GPU runs with device=cpu at tiny sizes; no speed is asserted, only that every
part ran and gave a finite, positive figure in a well-formed row, and that without CUDA the section is one
"skipped" row rather than a failure."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from seqlab.bench import gpu
from seqlab.bench.harness import check_goal
from seqlab.bench.results import markdown
from seqlab.cli.main import main as cli_main

KEYS = {"section", "name", "what", "value", "unit", "goal", "pass", "detail"}


def test_every_part_runs_on_a_cpu_and_gives_finite_positive_rows() -> None:
    rows = gpu.rows(gpu.GpuPlan.smoke())
    names = [r["name"] for r in rows]
    assert names[0] == "cpu: float32 matmul peak"
    assert names[1:3] == ["tiny preset, float32: tokens/s", "tiny preset, float32: MFU"]
    assert names[3].startswith("attention kernel in training: ")
    assert "training step: math-only SDPA / default" in names  # the math backend runs everywhere
    assert [n for n in names if n.startswith("minGRU vs")] == [
        "minGRU vs seqlab's fused GRU, L=32", "minGRU vs torch.nn.GRU, L=32", "minGRU vs the GRU's explicit loop, L=32"]
    for r in rows:
        assert set(r) == KEYS and r["section"] == "gpu"
        assert math.isfinite(r["value"]) and r["value"] > 0, r
        assert r["pass"] == check_goal(r["value"], r["goal"])
    train = rows[1]["detail"]
    assert train["steps"] == 2 and train["tokens_per_step"] == 8 * 32  # the tiny preset's batch x window
    assert 0 < train["real_tokens_per_s"] <= rows[1]["value"]  # padding is processed but is not text
    mfu = rows[2]["value"] * train["peak_gflops"] * 1e9 / train["flops_per_token"]
    assert mfu == pytest.approx(rows[1]["value"])
    kernel = rows[3]["detail"]
    assert kernel["forced"]["math"] is None and sum(kernel["forward_calls"].values()) >= 1  # one per layer and step
    chosen = rows[3]["name"].split(": ")[1].split("+")
    assert all(kernel["forward_calls"][b] > 0 for b in chosen)


def test_without_cuda_the_section_is_one_skipped_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli_main(["bench", "--only", "gpu", "--out", str(tmp_path)]) == 0
    payload = json.loads((tmp_path / "bench.json").read_text())
    assert payload["errors"] == {} and [r["name"] for r in payload["rows"]] == ["skipped: no CUDA device"]
    assert payload["rows"][0]["pass"] is None
    assert "| gpu | skipped: no CUDA device | skipped |  |  |" in (tmp_path / "bench.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json", "bench.md"]  # no scratch left in --out


def test_a_failed_part_is_a_miss_row_and_the_others_still_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> list[dict]:
        raise RuntimeError("no kernel image is available for execution on the device")

    monkeypatch.setattr(gpu, "recurrent_rows", broken)
    plan = gpu.GpuPlan.smoke()
    plan.steps = 1
    rows = gpu.rows(plan)
    failed = rows[-1]
    assert failed["name"] == "minGRU: failed" and failed["pass"] is False and math.isnan(failed["value"])
    assert "no kernel image" in failed["what"] and rows[1]["name"].endswith("tokens/s")
    payload = {"quick": False, "wall_s": 1.0, "errors": {}, "rows": rows,
               "machine": {"torch": "x", "threads": 1, "cpus": 2, "cpu": "cpu", "load_1min": 0.0,
                           "omp_wait_policy": "", "fp32_matmul_peak_gflops": 1.0}}
    assert "| gpu | minGRU: failed | failed |  | **MISS** |" in markdown(payload)
