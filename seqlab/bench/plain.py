"""Plain-PyTorch language models of the same size and shape as seqlab's, the yardsticks of the throughput rows.

Written the way one writes them without seqlab (as in nanoGPT-style code), so that a gap between seqlab's
tokens/s and theirs is overhead of seqlab's own structure, not of the arithmetic:

- `PlainTransformerLM`: token + learned position embedding, n_layer pre-norm blocks of one fused QKV
  linear, `scaled_dot_product_attention(is_causal=True)`, output projection and a GELU MLP (4 C wide),
  a final LayerNorm and a head tied to the token embedding; no biases, like seqlab's default.
- `PlainGRULM`: the same blocks with a `torch.nn.GRU` layer in place of attention (pre-norm residual,
  then the GELU MLP), no positions (like seqlab's GRU), LayerNorm and a tied head.

Both start from the GPT-2 initialisation such code writes out (Radford et al. 2019, as nanoGPT does):
N(0, 0.02) for every linear map and embedding, N(0, 0.02 / sqrt(2 n_layer)) for the projections that
end a residual branch. PyTorch's default N(0, 1) embedding, tied to the head, makes the logits so large
that the softmax and its gradient run on subnormal floats, which slowed the plain side's training step
many times over on a CPU that does not flush them (the experiments index): a ratio against that would
measure the yardstick's bad start, not seqlab.

Both return logits only (B, T, V); the benchmark computes the same cross-entropy for them as for seqlab.
"""

from __future__ import annotations

import math

import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.config import ModelConfig


def gpt2_init(model: nn.Module, n_layer: int, residual_ends: tuple[str, ...]) -> None:
    """N(0, 0.02) weights for every Linear and Embedding, N(0, 0.02 / sqrt(2 n_layer)) for the Linear
    modules whose name ends in one of `residual_ends` (the last map of each residual branch)."""
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            last = name.rsplit(".", 1)[-1]
            std = 0.02 / math.sqrt(2 * n_layer) if last in residual_ends else 0.02
            nn.init.normal_(module.weight, mean=0.0, std=std)


class _Block(nn.Module):
    def __init__(self, c: int, n_head: int, mlp_ratio: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(c, bias=False)
        self.qkv = nn.Linear(c, 3 * c, bias=False)  # W_Q, W_K, W_V in one matmul
        self.proj = nn.Linear(c, c, bias=False)
        self.ln_2 = nn.LayerNorm(c, bias=False)
        self.fc = nn.Linear(c, mlp_ratio * c, bias=False)
        self.out = nn.Linear(mlp_ratio * c, c, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(c, dim=-1)  # (B, T, C) each
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))  # (B, H, T, D)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln_2(x))))


class PlainTransformerLM(nn.Module):
    """A GPT-style LM in plain PyTorch: idx (B, T) -> logits (B, T, V)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(_Block(cfg.n_embd, cfg.n_head, cfg.mlp_ratio) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=False)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.head.weight = self.wte.weight
        gpt2_init(self, cfg.n_layer, ("proj", "out"))

    def forward(self, idx: Tensor) -> Tensor:
        x = self.wte(idx) + self.wpe.weight[: idx.size(1)]  # (B, T, C) + (T, C)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class _GRUBlock(nn.Module):
    def __init__(self, c: int, mlp_ratio: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(c, bias=False)
        self.gru = nn.GRU(c, c, batch_first=True)
        self.ln_2 = nn.LayerNorm(c, bias=False)
        self.fc = nn.Linear(c, mlp_ratio * c, bias=False)
        self.out = nn.Linear(mlp_ratio * c, c, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.gru(self.ln_1(x))[0]  # (B, T, C)
        return x + self.out(F.gelu(self.fc(self.ln_2(x))))


class PlainGRULM(nn.Module):
    """An LM on `torch.nn.GRU` layers: idx (B, T) -> logits (B, T, V)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.blocks = nn.ModuleList(_GRUBlock(cfg.n_embd, cfg.mlp_ratio) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=False)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.head.weight = self.wte.weight
        gpt2_init(self, cfg.n_layer, ("out",))

    def forward(self, idx: Tensor) -> Tensor:
        x = self.wte(idx)  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))
