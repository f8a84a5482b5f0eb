"""The small-budget recipe's options: the WSD schedule, Muon + AdamW, the weight average (EMA) and QK-norm,
each against an explicit computation, and exact resume of a run that uses them all."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from seqlab.models.attention import MultiHeadAttention, causal_mask
from seqlab.training.ema import WeightAverage
from seqlab.training.optim import MuonAdamW, lr_at, make_optimizer, muon_params
from tests.tiny_models import tiny_lm, token_ids
from tests.trainers import tiny_trainer


def test_wsd_is_constant_then_cools_down_linearly() -> None:
    lrs = [lr_at(s, 1.0, 10, 100, 0.1, schedule="wsd", cooldown_frac=0.2) for s in range(101)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(lr == 1.0 for lr in lrs[10:81])  # stable until 80% of the budget
    assert lrs[90] == pytest.approx(0.55) and lrs[100] == pytest.approx(0.1)  # linear to lr * min_ratio
    # a wall-clock budget paces the cooldown when it runs out first
    assert lr_at(20, 1.0, 10, 1000, 0.1, time_frac=0.9, schedule="wsd", cooldown_frac=0.2) == pytest.approx(0.55)
    assert lr_at(20, 1.0, 10, 1000, 0.1, time_frac=1.0, schedule="wsd") == pytest.approx(0.1)


def test_muon_takes_the_hidden_matrices_only() -> None:
    for mixer, pos in (("attention", "rope"), ("gru", "none")):
        model = tiny_lm(mixer, pos)
        hidden, rest = muon_params(model)
        names = {id(p): n for n, p in model.named_parameters()}
        assert all(p.dim() == 2 for p in hidden) and len(hidden) + len(rest) == len(list(model.parameters()))
        assert "wte.weight" not in {names[id(p)] for p in hidden}  # the (tied) embedding and head stay AdamW
        assert {names[id(p)] for p in rest} >= {"wte.weight", "ln_f.weight"}
        expected = {"mixer.q_proj.weight", "mlp.fc.weight"} if mixer == "attention" else {"mixer.cell.weight_hh_l0"}
        assert expected <= {names[id(p)].partition(".")[2].partition(".")[2] for p in hidden}


def _loss(model: torch.nn.Module, seed: int) -> torch.Tensor:
    idx = token_ids(2, 12, seed=seed)
    logits, _ = model(idx[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())


def test_muon_adamw_steps_as_the_two_builtins_and_resumes_exactly() -> None:
    ours, ref = tiny_lm("attention", "rope").train(), tiny_lm("attention", "rope").train()
    opt = make_optimizer(ours, 1e-2, 0.1, (0.9, 0.95), torch.device("cpu"), "muon")
    assert isinstance(opt, MuonAdamW)
    hidden, rest = muon_params(ref)
    muon = torch.optim.Muon(hidden, lr=1e-2, weight_decay=0.1, adjust_lr_fn="match_rms_adamw")
    adamw = torch.optim.AdamW([{"params": [p for p in rest if p.dim() >= 2], "weight_decay": 0.1},
                               {"params": [p for p in rest if p.dim() < 2], "weight_decay": 0.0}],
                              lr=1e-2, betas=(0.9, 0.95), fused=True)  # as make_optimizer builds it on CPU
    for seed in range(2):
        for model, step in ((ours, opt.step), (ref, lambda: (muon.step(), adamw.step()))):
            _loss(model, seed).backward()
            step()
            model.zero_grad(set_to_none=True)
    assert all(torch.equal(a, b) for a, b in zip(ours.parameters(), ref.parameters()))
    # a copy resumed from the state dict continues exactly as the original
    twin = copy.deepcopy(ours)
    twin_opt = make_optimizer(twin, 1e-2, 0.1, (0.9, 0.95), torch.device("cpu"), "muon")
    twin_opt.load_state_dict(copy.deepcopy(opt.state_dict()))  # loading shares tensors; a checkpoint would not
    for model, o in ((ours, opt), (twin, twin_opt)):
        _loss(model, 5).backward()
        o.step()
    assert all(torch.equal(a, b) for a, b in zip(ours.parameters(), twin.parameters()))


def test_weight_average_follows_its_formula_and_swaps_back() -> None:
    model = torch.nn.Linear(3, 2)
    avg, expect = WeightAverage(model, 0.9), model.weight.detach().clone()
    for n in range(1, 4):
        with torch.no_grad():
            model.weight.add_(1.0)
        avg.update()
        d = min(0.9, (1 + n) / (10 + n))
        expect = d * expect + (1 - d) * model.weight.detach()
    raw = model.weight.detach().clone()
    with avg.applied() as saved:
        assert torch.allclose(model.weight, expect) and torch.equal(saved["weight"], raw)
    assert torch.equal(model.weight, raw)


def test_qk_norm_equals_an_explicit_computation() -> None:
    torch.manual_seed(0)
    att = MultiHeadAttention(16, 2, qk_norm=True).eval()
    with torch.no_grad():  # gains away from 1, so the test sees that they are applied
        att.q_norm.weight.uniform_(0.5, 2.0)
        att.k_norm.weight.uniform_(0.5, 2.0)
    x = torch.randn(2, 7, 16)
    y, _ = att(x)
    wk, wv = att.kv_proj.weight.split(16, dim=0)

    def heads(t: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, H, T, D)
        return t.view(2, 7, 2, 8).transpose(1, 2)

    def rms_norm(t: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
        eps = torch.finfo(t.dtype).eps
        return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + eps) * gain

    q, k, v = heads(x @ att.q_proj.weight.T), heads(x @ wk.T), heads(x @ wv.T)
    q, k = rms_norm(q, att.q_norm.weight), rms_norm(k, att.k_norm.weight)
    s = q @ k.transpose(-2, -1) / math.sqrt(8) + causal_mask(7)  # (B, H, T, T)
    out = (s.softmax(-1) @ v).transpose(1, 2).reshape(2, 7, 16) @ att.out_proj.weight.T
    assert torch.allclose(y, out, atol=1e-5)


def test_resume_with_every_option_is_bitwise_exact(tiny_data_dir: Path, tmp_path: Path) -> None:
    opts = ["model.mixer=hybrid", "model.qk_norm=true", "train.optimizer=muon", "train.ema=0.9",
            "train.schedule=wsd", "train.max_steps=16", "train.ckpt_every=5", "train.eval_every=7"]
    tiny_trainer(tiny_data_dir, tmp_path / "ref", *opts).run()
    first = tiny_trainer(tiny_data_dir, tmp_path / "run", *opts)
    should_stop = first._should_stop
    first._should_stop = lambda flag: "test stop" if first.progress.step >= 9 else should_stop(flag)  # type: ignore[method-assign]
    assert first.run()["steps"] == 9
    tiny_trainer(tiny_data_dir, tmp_path / "run", resume=True).run()
    ref, run = (load_file(str(p / "model.safetensors")) for p in (tmp_path / "ref", tmp_path / "run"))
    assert ref.keys() == run.keys() and all(torch.equal(ref[k], run[k]) for k in ref)
    raw = torch.load(tmp_path / "run" / "trainer_state.pt", weights_only=True)["ema"]["raw"]
    assert any(not torch.equal(raw[k], run[k]) for k in run)  # the file holds the average, not the raw weights
