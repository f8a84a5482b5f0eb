"""bf16 on the CPU: the detection of bf16 instructions, the bf16 training step the bench times, its rows.

No speed is asserted. The step under `autocast_for("bf16")` is compared with explicit bf16 arithmetic
(a linear layer) and with the fp32 step (close, not equal: it really ran in bf16)."""

from __future__ import annotations

import dataclasses
import json
import platform
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from seqlab.bench import bf16
from seqlab.bench.harness import check_goal
from seqlab.bench.throughput import family_config, seqlab_step
from seqlab.cli.main import main as cli_main
from seqlab.config import get_preset
from seqlab.runs.precision import autocast_for, cpu_has_native_bf16, resolve_precision

CPU = torch.device("cpu")


def test_torchs_cpu_query_agrees_with_the_flags_auto_reads() -> None:
    """torch's own cpuinfo query (AVX512_BF16 or AMX tiles) and the /proc/cpuinfo flags that
    train.precision=auto reads give the same answer on this machine (where both exist)."""
    query = [getattr(torch.cpu, n, None) for n in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if not Path("/proc/cpuinfo").is_file() or not all(callable(q) for q in query) or platform.machine() != "x86_64":
        pytest.skip("needs Linux on x86 and torch's cpuinfo query")
    native = torch.backends.mkldnn.is_available() and any(q() for q in query)  # type: ignore[misc]
    assert cpu_has_native_bf16() == native
    assert bf16.default_precision() == resolve_precision(get_preset("small").train.precision, CPU)
    assert bf16.default_precision() == ("bf16" if native else "fp32")


def test_bf16_autocast_is_bf16_arithmetic() -> None:
    """Under autocast_for("bf16") a linear layer gives exactly the bf16 product of bf16-rounded inputs."""
    gen = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(5, 16, generator=gen), torch.randn(8, 16, generator=gen), torch.randn(8, generator=gen)
    with autocast_for("bf16", CPU)():
        y = F.linear(x, w, b)
    assert y.dtype == torch.bfloat16
    assert torch.equal(y, F.linear(x.bfloat16(), w.bfloat16(), b.bfloat16()))
    with autocast_for("fp32", CPU)():
        assert F.linear(x, w, b).dtype == torch.float32


@pytest.mark.parametrize("family", ["attention", "gru", "mingru"])
def test_bf16_training_step_is_close_to_fp32_and_not_equal(family: str) -> None:
    """The bench's bf16 step (forward under autocast, loss float32, fp32 weights) moves the weights as the
    fp32 step does to bf16 accuracy, and not identically (it did compute in bf16)."""
    cfg, _ = family_config(family, "tiny")
    cfg = dataclasses.replace(cfg, block_size=16, n_layer=1)
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
    if not cpu_has_native_bf16():
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


def test_the_evaluation_goal_row_compares_like_with_like_at_the_default_precision() -> None:
    from seqlab.bench.eval_speed import speed_rows

    times = {"train_fp32": 0.2, "train_bf16": 0.1, "eval": 1.0, "eval_bf16": 0.5, "windows": 2.0}
    result = {"tokens": 4000, "bpb": 2.0, "bpb_bf16": 2.0001}
    rows = {r["name"]: r for r in speed_rows("attention", "val", "sliding", 1000, 4100, result, times)}
    default = bf16.default_precision()
    goal = rows["attention small: eval / train"]
    assert goal["goal"] == ">= 3.0" and goal["detail"]["train_precision"] == default
    assert goal["detail"]["eval_precision"] == default
    # evaluation as seqlab eval runs a run trained here: fp32 4000 tokens/s against 5000 training tokens/s,
    # or bf16 8000 against 10000
    assert goal["value"] == pytest.approx(0.8)
    assert goal["detail"]["bpb_fp32"] == 2.0 and goal["detail"]["bpb_bf16"] == 2.0001
    if default == "bf16":  # the exact float32 evaluation against the same (bf16) step
        assert rows["attention small: fp32 eval / train"]["value"] == pytest.approx(0.4)
    else:
        assert rows["attention small: bf16 eval / bf16 train"]["value"] == pytest.approx(0.8)
    assert rows["attention small: sliding / windows"]["value"] == pytest.approx(2.0)
    assert sum(bool(r["goal"]) for r in rows.values()) == 1
