"""models/cpu_linear.py: oneDNN's inference linear (GELU fused) against F.linear / F.gelu, and held-out
scoring with it against scoring without it (float32: the same arithmetic, additions in another order)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from seqlab.config import ModelConfig
from seqlab.data.tokenizer import ByteTokenizer
from seqlab.evaluation.heldout import evaluate_lm
from seqlab.models import build_model
from seqlab.models.cpu_linear import _OP, linear, onednn_applies, use_onednn
from tests.test_eval_plans import make_store

needs_onednn = pytest.mark.skipif(_OP is None, reason="torch without oneDNN: linear is F.linear everywhere")


@needs_onednn
@pytest.mark.parametrize("gelu", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_onednn_linear_is_f_linear(gelu: bool, bias: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 70, 48, generator=gen).transpose(0, 1)  # (70, 3, 48), not contiguous
    w, b = torch.randn(37, 48, generator=gen) * 0.2, torch.randn(37, generator=gen) if bias else None
    with torch.inference_mode():
        assert onednn_applies(x)
        fast = linear(x, w, b, gelu=gelu)
        with use_onednn(False):
            assert not onednn_applies(x)
            ref = linear(x, w, b, gelu=gelu)
    ref_direct = F.linear(x, w, b)
    torch.testing.assert_close(ref, F.gelu(ref_direct) if gelu else ref_direct, rtol=0, atol=0)
    assert fast.shape == ref.shape == (70, 3, 37)
    # float32 sums in another order: each output within a few roundings of sum |x_k w_k| + |b|
    scale = F.linear(x.abs(), w.abs(), None if b is None else b.abs())
    assert ((fast - ref).abs() <= 8 * torch.finfo(torch.float32).eps * scale).all()


def test_the_path_needs_float32_cpu_no_autograd_no_autocast() -> None:
    x = torch.randn(4, 8)
    assert not onednn_applies(x)  # autograd on: training never takes it
    with torch.no_grad():
        assert onednn_applies(x) == (_OP is not None)
        assert not onednn_applies(x.double()) and not onednn_applies(x.bfloat16())
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not onednn_applies(x)
            assert linear(x, torch.randn(5, 8)).dtype == torch.bfloat16  # autocast still applies


@needs_onednn
@pytest.mark.parametrize("mixer,pos", [("attention", "rope"), ("attention", "learned"), ("gru", "none")])
def test_scoring_a_split_with_onednn_equals_scoring_without(tmp_path: Path, mixer: str, pos: str) -> None:
    """Float32 bits per byte of a whole split (sliding, windows, lanes) with and without the oneDNN path
    agree to float32's rounding (oneDNN picks its kernel, and so its summation order, by the CPU: about 1e-9
    relative on an AMD EPYC, 1.1e-9 on an Intel Xeon with AMX); a training forward is bitwise the same as
    before (it never takes the path)."""
    tok = ByteTokenizer()
    store = make_store(tmp_path / "d", [3, 30, 8, 17, 1, 9, 24, 60])
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=tok.vocab_size, block_size=8, n_layer=2, n_embd=32, n_head=2, mlp_ratio=4,
                      mixer=mixer, pos=pos)
    model = build_model(cfg)
    with use_onednn(False):
        ref = evaluate_lm(model, store, 8, 4, "cpu", tok)
    fast = evaluate_lm(model, store, 8, 4, "cpu", tok)
    assert fast["tokens"] == ref["tokens"] and fast["bytes"] == ref["bytes"]
    assert fast["bpb"] == pytest.approx(ref["bpb"], rel=1e-7, abs=0)
    x = torch.randint(0, tok.vocab_size, (2, 8))
    with use_onednn(False):
        before = model(x)[0]
    torch.testing.assert_close(model(x)[0], before, rtol=0, atol=0)
