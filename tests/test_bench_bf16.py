"""bf16 on the CPU: the detection of bf16 instructions, the bf16 training step the bench times, its rows.

No speed is asserted. The step under `autocast_for("bf16")` is compared with explicit bf16 arithmetic
(a linear layer) and with the fp32 step (close, not equal: it really ran in bf16)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from seqlab.bench import bf16
from seqlab.bench.common import check_goal
from seqlab.bench.throughput import family_config, seqlab_step
from seqlab.cli.main import main as cli_main
from seqlab.config import TrainConfig
from seqlab.training import precision
from seqlab.training.precision import autocast_for, bf16_native, cpu_bf16_native, resolve_precision


def test_the_two_ways_of_reading_the_cpu_flags_agree() -> None:
    """torch's cpuinfo query and Linux's /proc/cpuinfo flags give the same answer (where both exist)."""
    flags = precision._cpuinfo_flags()
    if not flags or not torch.backends.mkldnn.is_available() or not hasattr(torch.cpu, "_is_avx512_bf16_supported"):
        pytest.skip("needs Linux's /proc/cpuinfo, oneDNN and torch's cpuinfo query")
    assert cpu_bf16_native() == bool(flags & set(precision.CPU_BF16_FLAGS))
    assert bf16_native("cpu") == cpu_bf16_native() and bf16_native("meta") is False


def test_resolve_precision() -> None:
    assert resolve_precision("fp32", "cpu") == "fp32" and resolve_precision("bf16", "cpu") == "bf16"
    assert resolve_precision("auto", "cpu") == ("bf16" if cpu_bf16_native() else "fp32")
    with pytest.raises(ValueError, match="precision must be one of"):
        resolve_precision("fp16", "cpu")
    assert bf16.default_precision() == resolve_precision(getattr(TrainConfig(), "precision", "fp32"), "cpu")


def test_bf16_autocast_is_bf16_arithmetic() -> None:
    """Under autocast_for("bf16") a linear layer gives exactly the bf16 product of bf16-rounded inputs."""
    gen = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(5, 16, generator=gen), torch.randn(8, 16, generator=gen), torch.randn(8, generator=gen)
    with autocast_for("bf16", "cpu")():
        y = F.linear(x, w, b)
    assert y.dtype == torch.bfloat16
    assert torch.equal(y, F.linear(x.bfloat16(), w.bfloat16(), b.bfloat16()))
    with autocast_for("fp32", "cpu")():
        assert F.linear(x, w, b).dtype == torch.float32
    s32, s16 = precision.matmul_speedup(32, repeats=1)
    assert s32 > 0 and s16 > 0


@pytest.mark.parametrize("family", ["attention", "gru", "mingru"])
def test_bf16_training_step_is_close_to_fp32_and_not_equal(family: str) -> None:
    """The bench's bf16 step (forward under autocast, loss float32, fp32 weights) moves the weights as the
    fp32 step does to bf16 accuracy, and not identically (it did compute in bf16)."""
    cfg, _ = family_config(family, "tiny")
    cfg.block_size, cfg.n_layer = 16, 1
    moved = []
    for prec in ("fp32", "bf16"):
        model, step = seqlab_step(cfg, 2, seed=0, precision=prec)
        before = [p.detach().clone() for p in model.parameters()]
        step()
        moved.append(torch.cat([(p.detach() - q).flatten() for p, q in zip(model.parameters(), before)]))
        assert all(p.dtype == torch.float32 for p in model.parameters())
    assert not torch.equal(moved[0], moved[1])
    # AdamW's first step moves each weight by about lr * sign(grad): compare the update vectors
    cos = F.cosine_similarity(moved[0], moved[1], dim=0)
    assert cos > 0.9, cos


def test_bench_quick_bf16_rows(tmp_path: Path) -> None:
    assert cli_main(["bench", "--quick", "--only", "bf16", "--out", str(tmp_path)]) == 0
    payload = json.loads((tmp_path / "bench.json").read_text())
    rows = payload["rows"]
    assert payload["errors"] == {}
    if not cpu_bf16_native():
        assert [r["unit"] for r in rows] == ["skipped"] and "bf16_matmul_peak_gflops" not in payload["machine"]
        return
    assert payload["machine"]["bf16_matmul_peak_gflops"] > 0
    names = [r["name"] for r in rows]
    assert names[0] == "bf16 matmul peak / fp32"
    assert {f"{f} tiny: bf16 / fp32" for f in ("attention", "gru", "mingru", "rnn")} <= set(names)
    assert "mingru bf16 vs loop, L=128" in names and "mingru_L256 bf16" in names
    for r in rows:
        assert r["section"] == "bf16" and r["value"] > 0 and r["pass"] == check_goal(r["value"], r["goal"])
    goal_rows = {r["name"] for r in rows if r["goal"]}
    assert goal_rows == ({"mingru bf16 vs loop, L=128"} if bf16.default_precision() == "bf16" else set())


def test_the_evaluation_goal_row_compares_with_the_default_training_step() -> None:
    from seqlab.bench.heldout import _rows

    times = {"train_fp32": 0.2, "train_bf16": 0.1, "eval": 1.0, "eval_bf16": 0.5, "windows": 2.0}
    result = {"tokens": 4000, "bpb": 2.0, "bpb_bf16": 2.0001}
    rows = {r["name"]: r for r in _rows("attention", "val", "sliding", 1000, 4100, result, times)}
    default = bf16.default_precision()
    goal = rows["attention small: eval / train"]
    assert goal["goal"] == ">= 3.0" and goal["detail"]["train_precision"] == default
    # 4000 tokens/s of evaluation against 5000 (fp32) or 10000 (bf16) training tokens/s
    assert goal["value"] == pytest.approx(0.8 if default == "fp32" else 0.4)
    other = "bf16" if default == "fp32" else "fp32"
    expect = 0.4 if other == "bf16" else 0.8
    assert rows[f"attention small: eval / train ({other} step)"]["value"] == pytest.approx(expect)
    assert rows["attention small: bf16 eval / bf16 train"]["value"] == pytest.approx(0.8)
    assert rows["attention small: sliding / windows"]["value"] == pytest.approx(2.0)
    assert sum(bool(r["goal"]) for r in rows.values()) == 1
