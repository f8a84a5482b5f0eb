"""Tiny seeded language models and token ids, shared by the model tests (contract, LM shell).

Two layers of width 16 with an MLP, a vocabulary of 37 and block_size 16: small enough that every mixer x
position kind builds and runs in milliseconds on a CPU, large enough that every code path (two blocks,
several heads, cross-attention) is exercised.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqlab.config import ModelConfig
from seqlab.models import LM, build_model

V, C, BLOCK = 37, 16, 16  # vocab_size, n_embd, block_size


def tiny_lm(mixer: str, pos: str, seed: int = 0, **kw: object) -> LM:
    """A freshly initialised LM in eval mode; kw are further ModelConfig fields."""
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=V, block_size=BLOCK, mixer=mixer, n_layer=2, n_embd=C, n_head=2, pos=pos,
                      mlp_ratio=2, **kw)  # type: ignore[arg-type]
    return build_model(cfg).eval()


def token_ids(*shape: int, seed: int = 1) -> Tensor:
    """Seeded random token ids of the given shape, e.g. (B, T)."""
    return torch.randint(0, V, shape, generator=torch.Generator().manual_seed(seed))
