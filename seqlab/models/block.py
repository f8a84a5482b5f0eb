"""One block of the LM and the sequence mixer inside it (`seqlab.models.lm` stacks the blocks).

Each block is pre-norm residual (GPT-2, Radford et al. 2019): x = x + mixer(ln(x)), then cross-attention
over the context (model.context=cross or cross+copy), then x = x + mlp(ln(x)). `MIXERS` maps
ModelConfig.mixer to the constructor of a block's mixer; the hybrid chooses per layer (models/hybrid.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor, nn

from seqlab.config import ModelConfig
from seqlab.models.attention import MultiHeadAttention
from seqlab.models.cpu_linear import linear, onednn_applies
from seqlab.models.kv_cache import CrossKV
from seqlab.models.positional import attention_positions

__all__ = ["MIXERS", "MLP", "Block", "make_mixer"]


def _attention_mixer(cfg: ModelConfig) -> nn.Module:
    return MultiHeadAttention(cfg.n_embd, cfg.n_head, cfg.bias, cfg.dropout, attention_positions(cfg),
                              qk_norm=cfg.qk_norm)


def _recurrent_mixer(cell: str) -> Callable[[ModelConfig], nn.Module]:
    def make(cfg: ModelConfig) -> nn.Module:
        from seqlab.models.rnn import RecurrentMixer  # imported on use: nothing heavy at import time

        return RecurrentMixer(cfg, cell)

    return make


def _mingru_mixer(cfg: ModelConfig) -> nn.Module:
    from seqlab.models.mingru import MinGRUMixer

    return MinGRUMixer(cfg)


# name (ModelConfig.mixer) -> constructor of the sequence mixer of one block
MIXERS: dict[str, Callable[[ModelConfig], nn.Module]] = {
    "attention": _attention_mixer,
    "rnn": _recurrent_mixer("rnn"),
    "gru": _recurrent_mixer("gru"),
    "mingru": _mingru_mixer,
}


def make_mixer(cfg: ModelConfig, layer: int) -> nn.Module:
    """The sequence mixer of block `layer`: the `MIXERS` entry, or for a hybrid the kind its pattern
    gives that layer (models/hybrid.py)."""
    if cfg.mixer == "hybrid":
        from seqlab.models.hybrid import hybrid_mixer

        return hybrid_mixer(cfg, layer)
    return MIXERS[cfg.mixer](cfg)


class MLP(nn.Module):
    """Position-wise feed-forward: C -> mlp_ratio * C -> GELU -> C."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, cfg.mlp_ratio * cfg.n_embd, bias=cfg.bias)
        self.act = nn.GELU()
        self.proj = nn.Linear(cfg.mlp_ratio * cfg.n_embd, cfg.n_embd, bias=cfg.bias)

    def forward(self, x: Tensor) -> Tensor:
        if onednn_applies(x):  # no gradient needed: GELU fused into fc's oneDNN linear (models/cpu_linear.py)
            return linear(linear(x, self.fc.weight, self.fc.bias, gelu=True), self.proj.weight, self.proj.bias)
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    """One pre-norm residual block: mixer, optional cross-attention, optional MLP."""

    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mixer = make_mixer(cfg, layer)
        if isinstance(self.mixer, MultiHeadAttention):
            self.mixer.layer = layer
        cross = cfg.cross_attends
        self.ln_x = nn.LayerNorm(cfg.n_embd, bias=cfg.bias) if cross else None
        self.xattn = MultiHeadAttention(cfg.n_embd, cfg.n_head, cfg.bias, cfg.dropout) if cross else None
        if self.xattn is not None:
            self.xattn.layer = layer
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias) if cfg.mlp_ratio > 0 else None
        self.mlp = MLP(cfg) if cfg.mlp_ratio > 0 else None
        self.drop = nn.Dropout(cfg.dropout)  # residual dropout on every branch

    def forward(
        self,
        x: Tensor,
        state: Any,
        context: Tensor | None,
        cross: CrossKV | None,
        reset: Tensor | None,
        context_mask: Tensor | None,
        init: Tensor | None = None,
    ) -> tuple[Tensor, Any, CrossKV | None]:
        extra = {"init": init} if init is not None else {}  # only a recurrent mixer under model.context=init_state
        h, state = self.mixer(self.ln_1(x), state=state, reset=reset, **extra)
        x = x + self.drop(h)
        # without any context (none given, none cached) the cross-attention branch is skipped
        if self.xattn is not None and self.ln_x is not None and (context is not None or cross is not None):
            h, cross = self.xattn(self.ln_x(x), context=context, state=cross, context_mask=context_mask)
            x = x + self.drop(h)
        if self.mlp is not None and self.ln_2 is not None:
            x = x + self.drop(self.mlp(self.ln_2(x)))
        return x, state, cross
