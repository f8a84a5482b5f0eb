"""The decoder's one-token step (generation/fast_step.py) is taken for every configuration it supports, and
agrees with the model's full forward pass over the same tokens: two computations, incremental and full.

The step has no quiet fallback at run time: a disagreement fails here. Every `ModelConfig` option is
listed below, as a dimension of the grid or with the reason it needs none, so an option added to the
model fails `test_every_model_option_is_accounted_for` until the grid covers it.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from seqlab.config import ModelConfig
from seqlab.generation.decode import IncrementalDecoder
from seqlab.generation.fast_step import FastStep
from seqlab.models import build_model
from seqlab.models.context_encoder import ContextBatch
from tests.tiny_models import token_ids

# the grid: every value of the options that change what one decoding step computes
GRID = {
    "mixer": ("attention", "rnn", "gru"),
    "pos": ("none", "learned", "sinusoidal", "rope", "alibi"),
    "context": ("none", "cross", "init_state"),
}
# options varied one at a time on a base configuration of each mixer
VARIANTS = {"bias": True, "qk_norm": True, "mlp_ratio": 0, "tie_weights": False, "fused_rnn": False, "n_layer": 3}
# options that need no grid, and why
ACCOUNTED = {
    "vocab_size": "a size", "block_size": "a size (the prompt below runs past it for RoPE's table)",
    "n_embd": "a size", "n_head": "a size (two heads below)", "dropout": "off in eval mode, where the step runs",
    "ctx_layers": "the context encoder runs in the prompt's forward pass, not in a step",
    "ctx_block_size": "the same", "hybrid_pattern": "hybrid models are declined by FastStep.of",
    "hybrid_cell": "the same", "attn_window": "the hybrid's local attention only",
}
STEPS = 5


def _cases() -> list[dict[str, object]]:
    cases = [dict(zip(GRID, values)) for values in itertools.product(*GRID.values())]
    cases += [{"mixer": m, "pos": "rope" if m == "attention" else "none", "context": "none", k: v}
              for m in GRID["mixer"] for k, v in VARIANTS.items()]
    valid = []
    for kw in cases:
        try:
            _config(kw)
        except ValueError:  # a combination the config refuses (e.g. init_state for attention)
            continue
        valid.append(kw)
    return valid


def _config(kw: dict[str, object]) -> ModelConfig:
    base: dict[str, object] = dict(vocab_size=37, block_size=16, n_layer=2, n_embd=16, n_head=2, mlp_ratio=2,
                                   ctx_block_size=8)
    return ModelConfig(**{**base, **kw})  # type: ignore[arg-type]


def _name(kw: dict[str, object]) -> str:
    return "-".join(f"{v}" if k in GRID else f"{k}={v}" for k, v in kw.items())


def incremental_and_full(model: torch.nn.Module, ctx: ContextBatch | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The next-token logits (B, STEPS, V) after each stepped token, by the decoder's steps (which must take
    the fast step) and by one forward pass over the prompt and the stepped tokens."""
    prompt = token_ids(3, 4)
    if model.cfg.pos != "learned":
        prompt = token_ids(3, model.cfg.block_size)  # the steps go past RoPE's precomputed table
    stepped = token_ids(3, STEPS, seed=5)  # (B, STEPS)
    with torch.inference_mode():
        dec = IncrementalDecoder(model, prompt, context=ctx)
        assert isinstance(dec.fast, FastStep) and dec.fast.usable(dec.state), "the fast step is not taken"
        got = torch.stack([dec.step(stepped[:, i]) for i in range(STEPS)], dim=1)
        extra = {"context": ctx.expand(3)} if ctx is not None else {}
        full, _ = model(torch.cat((prompt, stepped), dim=1), **extra)
    return got, full[:, prompt.size(1):].float()


@pytest.mark.parametrize("kw", _cases(), ids=_name)
def test_the_fast_step_is_taken_and_agrees_with_the_full_forward(kw: dict[str, object]) -> None:
    torch.manual_seed(0)
    model = build_model(_config(kw)).eval()
    ctx = ContextBatch.from_lists([[3, 4, 5], [6], [7, 8, 9, 10]]) if model.cfg.reads_context else None
    got, want = incremental_and_full(model, ctx)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_a_step_that_disagrees_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fast step off by a little (its attention output 1% too large) is caught, not used quietly."""
    real = FastStep._attend

    def nudged(self: FastStep, plan: object, a: torch.Tensor, cache: object) -> tuple:
        h, cache = real(self, plan, a, cache)
        return h * 1.01, cache

    monkeypatch.setattr(FastStep, "_attend", nudged)
    torch.manual_seed(0)
    model = build_model(_config({"mixer": "attention", "pos": "rope"})).eval()
    got, want = incremental_and_full(model, None)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_every_model_option_is_accounted_for() -> None:
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    covered = set(GRID) | set(VARIANTS) | set(ACCOUNTED)
    assert fields == covered, (f"options the fast step's agreement test does not cover: {sorted(fields - covered)}; "
                               f"listed but gone: {sorted(covered - fields)}")
