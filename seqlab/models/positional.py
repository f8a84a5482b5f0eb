"""Position information: none, learned, sinusoidal, rotary (RoPE) and ALiBi, behind one interface.

The lecture (slides "Self-attention without positions is permutation equivariant" and "A sequence needs
order beyond an unordered collection") shows why attention needs positions at all: without them
SA(PX) = P SA(X). Each handler here breaks that symmetry in one of three places, exposed as three hooks
that default to "do nothing":

- `embed(positions)`   added to the token embeddings (learned, sinusoidal); works with every mixer;
- `rotate(q, k, off)`  applied to queries and keys per head inside attention (rope);
- `score_bias(...)`    added to the attention scores S before the softmax (alibi).

`build_positions(cfg)` returns the handler the LM adds at the embedding; `attention_positions(cfg)`
returns the one each attention module uses (a fresh module per layer: its buffers are caches only and
are not saved in checkpoints).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from seqlab.config import ModelConfig


class PositionHandler(nn.Module):
    """Base class and the `none` kind: every hook is the identity."""

    kind = "none"

    def embed(self, positions: Tensor) -> Tensor | None:
        """Additive position vectors (B, T, C) for integer positions (B, T), or None."""
        return None

    def embed_first(self, t: int, device: torch.device) -> Tensor | None:
        """`embed` of positions 0..t-1 in every lane, as one (1, T, C) row that broadcasts over B, or None.

        The common case (fresh lanes, no email start inside them) gets its own hook so that a handler can
        read it without an index tensor: no gather, no scatter-add in the backward pass, and no reading
        the largest position back from the device to check it."""
        return self.embed(torch.arange(t, device=device)[None])

    def rotate(self, q: Tensor, k: Tensor, offset: int) -> tuple[Tensor, Tensor]:
        """Queries and keys (B, H, T, D) at positions offset..offset+T-1 with positions applied."""
        return q, k

    def score_bias(self, lq: int, lk: int, offset: int, device: torch.device, dtype: torch.dtype) -> Tensor | None:
        """Additive score bias (H, Lq, Lk) for queries at offset.. and keys at 0..Lk-1, or None."""
        return None

    def bias_at(self, qpos: Tensor, kpos: Tensor, dtype: torch.dtype) -> Tensor | None:
        """Additive score bias (H, Lq, Lk) for queries at positions qpos (Lq,) and keys at kpos (Lk,), or None."""
        return None


class LearnedPositions(PositionHandler):
    """Absolute learned positions: one trained vector per index 0..block_size-1, added to the embedding."""

    kind = "learned"

    def __init__(self, block_size: int, n_embd: int) -> None:
        super().__init__()
        self.block_size = block_size
        self.table = nn.Embedding(block_size, n_embd)  # (block_size, C)

    def embed(self, positions: Tensor) -> Tensor:
        top = int(positions.max()) if positions.numel() else 0
        if top >= self.block_size:
            raise ValueError(
                f"model.pos=learned has vectors for positions 0..{self.block_size - 1} "
                f"(model.block_size={self.block_size}) but position {top} was requested"
            )
        return self.table(positions)  # (B, T) -> (B, T, C)

    def embed_first(self, t: int, device: torch.device) -> Tensor:
        if t > self.block_size:
            raise ValueError(
                f"model.pos=learned has vectors for positions 0..{self.block_size - 1} "
                f"(model.block_size={self.block_size}) but position {t - 1} was requested"
            )
        return self.table.weight[:t][None]  # (1, T, C): rows 0..T-1, the same numbers as the lookup


def sinusoid_table(positions: Tensor, n_embd: int) -> Tensor:
    """Vaswani et al. 2017, section 3.5: PE[p, 2i] = sin(p / 10000^(2i/C)), PE[p, 2i+1] = cos(same).

    positions: any integer shape (...); returns (..., C) in float32. An odd C drops the last cosine.
    """
    half = (n_embd + 1) // 2
    inv_freq = torch.exp(-math.log(10000.0) * torch.arange(half, device=positions.device) * 2.0 / n_embd)
    angle = positions.to(torch.float32).unsqueeze(-1) * inv_freq  # (..., half)
    # interleave sin and cos so that dims 2i, 2i+1 share one frequency: (..., half, 2) -> (..., 2*half)
    pe = torch.stack((angle.sin(), angle.cos()), dim=-1).flatten(-2)
    return pe[..., :n_embd]


# Amplitude of the sinusoids inside the LM. Vaswani et al. scale the token embeddings by sqrt(d_model)
# (section 3.4) so tokens and positions arrive at comparable sizes; our embeddings start at N(0, 0.02)
# (GPT-2 init), so instead the unit sinusoids (RMS 1/sqrt 2) are scaled to the same RMS of 0.02, the
# scale learned positions start at too. Unscaled, the positions outweigh the tokens many times over and
# the model learns far slower (seqlab compare; the experiments index).
SINUSOID_AMPLITUDE = 0.02 * math.sqrt(2.0)


class SinusoidalPositions(PositionHandler):
    """Fixed sinusoids added to the embedding; a cached table up to block_size, computed beyond it."""

    kind = "sinusoidal"

    def __init__(self, block_size: int, n_embd: int, amplitude: float = 1.0) -> None:
        super().__init__()
        self.n_embd, self.amplitude = n_embd, amplitude
        # a cache, not a parameter: non-persistent so it never enters a checkpoint
        self.register_buffer("table", amplitude * sinusoid_table(torch.arange(block_size), n_embd),
                             persistent=False)

    def embed(self, positions: Tensor) -> Tensor:
        if positions.numel() and int(positions.max()) < self.table.size(0):
            return self.table[positions]  # (B, T) -> (B, T, C)
        return self.amplitude * sinusoid_table(positions, self.n_embd)  # beyond the cache, on the fly

    def embed_first(self, t: int, device: torch.device) -> Tensor:
        if t <= self.table.size(0):
            return self.table[:t][None]  # (1, T, C)
        return self.embed(torch.arange(t, device=device)[None])


class RotaryPositions(PositionHandler):
    """RoPE (Su et al. 2021, eq. 34): rotate each pair of q/k features by angle p * theta_i.

    theta_i = 10000^(-2i/D). Pairs are (x_i, x_{i + D/2}) ("rotate half"), a fixed permutation of the
    paper's adjacent pairs with the same property: q_m . k_n depends on positions only through m - n.
    """

    kind = "rope"

    def __init__(self, head_dim: int, block_size: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"model.pos=rope needs an even head width, not {head_dim}")
        self.head_dim = head_dim
        self.register_buffer("inv_freq", base ** (-torch.arange(0, head_dim, 2).float() / head_dim), persistent=False)
        self.register_buffer("cos", torch.empty(0), persistent=False)
        self.register_buffer("sin", torch.empty(0), persistent=False)
        self._extend(block_size)

    def _extend(self, length: int) -> None:
        """(Re)build the cos/sin cache (length, D/2); grown by doubling so decoding stays linear."""
        pos = torch.arange(length, device=self.inv_freq.device, dtype=torch.float32)
        angle = torch.outer(pos, self.inv_freq)  # (length, D/2)
        self.cos, self.sin = angle.cos(), angle.sin()

    def tables(self, offset: int, t: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos and sin (T, D/2) of positions offset..offset+T-1, the cache grown first where too short."""
        cos, sin = self.cos, self.sin  # one buffer lookup each: a decoding step calls this per layer
        if offset + t > cos.size(0):
            # a normal tensor even when first reached under inference_mode (held-out scoring), so a
            # later training step may still save it for backward
            with torch.inference_mode(False):
                self._extend(max(offset + t, 2 * cos.size(0)))
            cos, sin = self.cos, self.sin
        cos, sin = cos[offset : offset + t], sin[offset : offset + t]
        return (cos, sin) if cos.dtype == dtype else (cos.to(dtype), sin.to(dtype))

    def rotate(self, q: Tensor, k: Tensor, offset: int) -> tuple[Tensor, Tensor]:
        """The one application of RoPE (training, scoring and decoding all come here)."""
        cos, sin = self.tables(offset, q.size(-2), q.dtype)  # (T, D/2), broadcast over (B, H)
        if q.requires_grad or k.requires_grad or q.shape != k.shape:
            return rotate_half(q, cos, sin), rotate_half(k, cos, sin)
        # without autograd, queries and keys in one pass (the same numbers, elementwise): fewer small
        # operations for a decoding step, and no stacked copy kept for a backward pass in training
        qk = rotate_half(torch.stack((q, k)), cos, sin)  # (2, B, H, T, D)
        return qk[0], qk[1]


def rotate_half(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """[x1, x2] -> [x1 cos - x2 sin, x1 sin + x2 cos] on the two halves of the last dim (..., T, D)."""
    x1, x2 = x.chunk(2, dim=-1)  # (..., T, D/2) each
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def alibi_slopes(n_head: int) -> Tensor:
    """Press et al. 2022, section 3: geometric slopes 2^(-8/n), 2^(-16/n), ... for n a power of two;
    otherwise the slopes of the nearest lower power of two plus every other slope of the next one."""

    def powers(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    below = 2 ** int(math.floor(math.log2(n_head)))
    slopes = powers(below)
    if below < n_head:
        slopes += powers(2 * below)[0::2][: n_head - below]
    return torch.tensor(slopes, dtype=torch.float32)


class ALiBiPositions(PositionHandler):
    """ALiBi: no position vectors; score s_ij gets -m_h * |i - j| per head h (Press et al. 2022, eq. 1)."""

    kind = "alibi"

    def __init__(self, n_head: int) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_head), persistent=False)  # (H,)

    def score_bias(self, lq: int, lk: int, offset: int, device: torch.device, dtype: torch.dtype) -> Tensor:
        qpos = torch.arange(offset, offset + lq, device=device)  # query i sits at position offset + i
        return self.bias_at(qpos, torch.arange(lk, device=device), dtype)

    def bias_at(self, qpos: Tensor, kpos: Tensor, dtype: torch.dtype) -> Tensor:
        dist = (qpos[:, None] - kpos[None, :]).abs().to(torch.float32)  # (Lq, Lk); causal rows only see j <= i
        return (-self.slopes.to(qpos.device)[:, None, None] * dist).to(dtype)  # (H, Lq, Lk)


def build_positions(cfg: ModelConfig) -> PositionHandler:
    """The handler the LM applies at the embedding: learned or sinusoidal vectors, else the identity."""
    if cfg.pos == "learned":
        return LearnedPositions(cfg.block_size, cfg.n_embd)
    if cfg.pos == "sinusoidal":
        return SinusoidalPositions(cfg.block_size, cfg.n_embd, SINUSOID_AMPLITUDE)
    if cfg.pos in ("none", "rope", "alibi"):
        return PositionHandler()
    raise ValueError(f"model.pos must be one of none, learned, sinusoidal, rope, alibi, not {cfg.pos!r}")


def attention_positions(cfg: ModelConfig) -> PositionHandler | None:
    """The handler one self-attention module applies inside itself (rope, alibi), else None."""
    if cfg.pos == "rope":
        return RotaryPositions(cfg.n_embd // cfg.n_head, cfg.block_size)
    if cfg.pos == "alibi":
        return ALiBiPositions(cfg.n_head)
    return None
