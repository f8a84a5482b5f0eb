"""train.precision: which CPUs `auto` trusts with bf16, and a bf16 step against the fp32 one."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from seqlab.config import apply_overrides, get_preset
from seqlab.evaluation.heldout import lm_loss
from seqlab.evaluation.report import evaluate_run, format_eval
from seqlab.models import build_model
from seqlab.options import EvalOptions
from seqlab.runs import precision
from seqlab.runs.precision import autocast_for, cpu_has_native_bf16, resolve_precision
from seqlab.training.trainer import train

CPU = torch.device("cpu")


@pytest.mark.parametrize(("flags", "native"), [
    ("fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni", True),  # AMD Zen 4, Intel Cooper Lake
    ("fpu avx2 avx512f amx_bf16 amx_tile", True),  # Intel Sapphire Rapids
    ("fpu sse2 avx2 fma avx512f avx512bw", False),  # AVX-512 without bf16 dot products
])
def test_native_bf16_read_from_the_cpu_flags(tmp_path: Path, flags: str, native: bool) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: test\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
    assert cpu_has_native_bf16(info) is (native and torch.backends.mkldnn.is_available())


def test_no_cpuinfo_means_fp32(tmp_path: Path) -> None:
    assert cpu_has_native_bf16(tmp_path / "missing") is False


def test_auto_follows_the_hardware(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_precision("fp32", CPU) == "fp32" and resolve_precision("bf16", CPU) == "bf16"
    for native in (True, False):
        monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda native=native: native)
        assert resolve_precision("auto", CPU) == ("bf16" if native else "fp32")
    assert resolve_precision("auto", torch.device("mps")) == "fp32"
    with pytest.raises(ValueError, match="precision"):
        resolve_precision("fp16", CPU)


def test_bad_precision_is_a_user_error() -> None:
    with pytest.raises(ValueError, match="train.precision must be auto, fp32 or bf16"):
        apply_overrides(get_preset("tiny"), ["train.precision=half"])


@pytest.mark.parametrize("mixer", ["attention", "gru", "mingru"])
def test_bf16_step_matches_fp32(mixer: str) -> None:
    """The same weights and batch: under bf16 autocast the loss and every gradient stay within bf16's
    rounding of the fp32 ones, the weights and gradients stay float32, and a matmul really ran in bf16."""
    cfg = dataclasses.replace(get_preset("tiny").model, vocab_size=259, mixer=mixer, n_embd=64, n_head=4,
                              pos="rope" if mixer == "attention" else "none")
    torch.manual_seed(0)
    model = build_model(cfg)
    x, y = torch.randint(0, 259, (4, 32)), torch.randint(0, 259, (4, 32))
    results = []
    for name in ("fp32", "bf16"):
        model.zero_grad(set_to_none=True)
        with autocast_for(name, CPU)():
            logits = model(x)[0]
            loss = lm_loss(logits, y)
        loss.backward()
        results.append((logits.dtype, loss.item(), [p.grad.clone() for p in model.parameters()]))
    (dt32, l32, g32), (dt16, l16, g16) = results
    assert dt32 == torch.float32 and dt16 == torch.bfloat16
    assert l16 == pytest.approx(l32, rel=1e-2)
    for a, b in zip(g32, g16, strict=True):
        assert b.dtype == torch.float32
        assert torch.linalg.vector_norm(a - b) <= 0.05 * torch.linalg.vector_norm(a) + 1e-6


def test_a_bf16_run_trains_and_says_so(tiny_data_dir: Path, tmp_path: Path) -> None:
    """A bf16 run and an fp32 run of the same seed end near each other; run.json names the precision."""
    finals = {}
    for name in ("fp32", "bf16"):
        cfg = apply_overrides(get_preset("tiny"), ["train.max_steps=30", "train.threads=1",
                                                   f"train.precision={name}"])
        summary = train(tiny_data_dir, tmp_path / name, cfg, progress=False)
        info = json.loads((tmp_path / name / "run.json").read_text())
        assert info["precision"] == name and not summary["failed"]
        finals[name] = summary["best_val_loss"]
    assert finals["bf16"] == pytest.approx(finals["fp32"], rel=0.02)
    # seqlab eval scores a run in the precision it trained in, unless told otherwise
    evals = {(run, p): evaluate_run(tmp_path / run, EvalOptions(split="val", completions=False, precision=p))
             for run, p in (("fp32", "run"), ("fp32", "fp32"), ("bf16", "run"), ("bf16", "fp32"))}
    assert [e["precision"] for e in evals.values()] == ["fp32", "fp32", "bf16", "fp32"]
    assert evals["fp32", "run"]["bpb"] == evals["fp32", "fp32"]["bpb"]  # the same float32 pass
    assert evals["bf16", "run"]["bpb"] != evals["bf16", "fp32"]["bpb"]  # bf16 matmuls really ran
    assert evals["bf16", "run"]["bpb"] == pytest.approx(evals["bf16", "fp32"]["bpb"], rel=1e-2)
    assert "bf16" in format_eval(evals["bf16", "run"])
