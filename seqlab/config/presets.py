"""The presets, as functions: `tiny` (tests), `small` (a CPU run of minutes), `base` (a GPU run)."""

from __future__ import annotations

from collections.abc import Callable

from seqlab.config.run_config import RunConfig
from seqlab.config.sections import ModelConfig, TrainConfig


def preset_tiny() -> RunConfig:
    """Seconds on a CPU: for tests and smoke runs."""
    return RunConfig(
        model=ModelConfig(block_size=32, n_layer=1, n_embd=32, n_head=2, pos="rope", mlp_ratio=2),
        train=TrainConfig(max_steps=30, batch_size=8, lr=3e-3, warmup_steps=5, eval_every=10,
                          eval_batches=4, ckpt_every=10, log_every=5,
                          precision="fp32"),  # exact numbers on every machine; bf16 gains nothing at width 32
    )


def preset_small() -> RunConfig:
    """A useful model from a CPU run of minutes."""
    return RunConfig(
        model=ModelConfig(block_size=128, n_layer=2, n_embd=128, n_head=4, pos="rope", dropout=0.0),
        # wsd: lower validation loss than cosine at equal tokens, for attention and the GRU alike
        # (the schedule study, experiments index)
        train=TrainConfig(max_steps=3000, batch_size=16, lr=3e-3, warmup_steps=100, eval_every=250,
                          eval_batches=32, ckpt_every=250, log_every=25, schedule="wsd"),
    )


def preset_base() -> RunConfig:
    """A GPU run."""
    return RunConfig(
        model=ModelConfig(block_size=512, n_layer=6, n_embd=384, n_head=6, pos="rope", dropout=0.1),
        train=TrainConfig(max_steps=20000, batch_size=64, lr=1e-3, warmup_steps=500, eval_every=1000,
                          eval_batches=64, ckpt_every=1000, log_every=50, schedule="wsd"),
    )


PRESETS: dict[str, Callable[[], RunConfig]] = {"tiny": preset_tiny, "small": preset_small, "base": preset_base}


def get_preset(name: str) -> RunConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]()
