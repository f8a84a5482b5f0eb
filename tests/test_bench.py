"""`seqlab bench` at its smallest, and the FLOP count behind MFU against PyTorch's own FLOP counter.

No speed is asserted: the benchmark's figures are ratios it prints; here only their shape is checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from seqlab.bench.harness import check_goal
from seqlab.bench.plain import PlainGRULM, PlainTransformerLM
from seqlab.bench.results import markdown
from seqlab.cli.main import main as cli_main
from seqlab.config import ModelConfig
from seqlab.models import build_model
from seqlab.training.flops import flops_per_token, matmul_params


def test_bench_quick_layers_writes_json_and_table(tmp_path: Path) -> None:
    assert cli_main(["bench", "--quick", "--only", "layers", "--out", str(tmp_path)]) == 0
    payload = json.loads((tmp_path / "bench.json").read_text())
    machine = payload["machine"]
    assert {"torch", "threads", "cpus", "cpu", "fp32_matmul_peak_gflops"} <= set(machine)
    assert machine["fp32_matmul_peak_gflops"] > 0 and payload["errors"] == {}
    names = [r["name"] for r in payload["rows"]]
    assert names[:3] == ["attention", "gru_fused", "mingru"] and "mingru_scan" in names
    for r in payload["rows"]:
        assert set(r) == {"section", "name", "what", "value", "unit", "goal", "pass", "detail"}
        assert r["section"] == "layers" and r["value"] > 0
        assert r["pass"] == check_goal(r["value"], r["goal"])
    table = (tmp_path / "bench.md").read_text()
    assert sum(line.startswith("| layers |") for line in table.splitlines()) == len(names)


def test_bench_rejects_an_unknown_section(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli_main(["bench", "--only", "layers,nonsense"])
    assert exc.value.code == 2 and "sections are" in capsys.readouterr().err


def test_goals_and_a_failed_section_in_the_table() -> None:
    assert check_goal(1.2, ">= 1.0") is True and check_goal(0.61, ">= 0.6") is True
    assert check_goal(1.1, "<= 1.0") is False and check_goal(3.0, "") is None
    payload = {"quick": True, "wall_s": 1.0, "errors": {"prepare": "RuntimeError: no script"}, "rows": [],
               "machine": {"torch": "x", "threads": 2, "cpus": 2, "cpu": "cpu", "load_1min": 0.0,
                           "omp_wait_policy": "PASSIVE", "fp32_matmul_peak_gflops": 100.0}}
    assert "| prepare | failed: RuntimeError: no script | | | **MISS** |" in markdown(payload)


@pytest.mark.parametrize("mixer", ["attention", "gru", "mingru", "rnn"])
def test_flops_per_token_counts_the_matmuls_torch_counts(mixer: str) -> None:
    """6 * N_matmul per token equals the matmul FLOPs of a forward and backward pass as PyTorch's
    FlopCounterMode counts them (exactly; the recurrent ones skip one hidden-state gradient at t = 0)."""
    B, T = 2, 16
    cfg = ModelConfig(vocab_size=50, block_size=T, n_layer=2, n_embd=32, n_head=4, mixer=mixer,
                      pos="learned" if mixer == "attention" else "none")
    torch.manual_seed(0)
    models = [build_model(cfg)]
    models += [PlainTransformerLM(cfg)] if mixer == "attention" else [PlainGRULM(cfg)] if mixer == "gru" else []
    for model in models:
        with FlopCounterMode(display=False) as counter:
            out = model(torch.randint(0, 50, (B, T)))
            (out[0] if isinstance(out, tuple) else out).sum().backward()
        mm = sum(v for k, v in counter.get_flop_counts()["Global"].items() if "mm" in str(k))
        ours = 6 * matmul_params(model) * B * T
        assert mm == ours if mixer in ("attention", "mingru") else abs(mm - ours) <= 0.01 * ours
        attention = flops_per_token(model, cfg, T) * B * T - ours
        assert attention == (6 * cfg.n_layer * T * cfg.n_embd * B * T if mixer == "attention" else 0)


def test_plain_models_have_seqlabs_size() -> None:
    for mixer in ("attention", "gru"):
        cfg = ModelConfig(vocab_size=50, block_size=16, n_layer=2, n_embd=32, n_head=4, mixer=mixer,
                          pos="learned" if mixer == "attention" else "none")
        plain = PlainTransformerLM(cfg) if mixer == "attention" else PlainGRULM(cfg)
        n_plain = sum(p.numel() for p in plain.parameters())
        n_ours = sum(p.numel() for p in build_model(cfg).parameters())
        # the GRU: torch.nn.GRU has two bias vectors per gate where seqlab's cell has one
        assert n_plain == n_ours if mixer == "attention" else abs(n_plain - n_ours) <= 6 * 32 * 2


def test_the_allocator_rows_time_each_side_in_its_own_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    from seqlab.bench import allocator
    from seqlab.training.cpu_allocator import applies

    if not applies():
        assert allocator.rows(True, 1) == []
        return
    assert allocator.spawn("recipe", True, 1, True, 1) > 0  # one real child: a fresh interpreter's step
    calls: list[tuple[str, bool]] = []

    def fake(name: str, kept: bool, steps: int, quick: bool, threads: int) -> float:
        calls.append((name, kept))
        return 1.0 if kept else 1.5

    monkeypatch.setattr(allocator, "spawn", fake)
    rows = allocator.rows(True, 1)
    assert [r["name"] for r in rows] == ["attention LM: freed memory kept", "gru-192 recipe: freed memory kept"]
    assert all(r["value"] == 1.5 and r["unit"] == "x" for r in rows)
    assert calls[:4] == [("attention", False), ("attention", True), ("attention", True), ("attention", False)]


def test_the_plain_models_start_from_the_gpt2_init() -> None:
    cfg = ModelConfig(vocab_size=259, block_size=32, n_layer=4, n_embd=64, n_head=4, mixer="attention", pos="learned")
    torch.manual_seed(0)
    plain = PlainTransformerLM(cfg)
    assert abs(plain.wte.weight.std().item() - 0.02) < 0.002  # not PyTorch's N(0, 1) embedding
    assert abs(plain.blocks[0].proj.weight.std().item() - 0.02 / (2 * cfg.n_layer) ** 0.5) < 0.002
