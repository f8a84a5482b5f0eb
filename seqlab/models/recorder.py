"""Capture attention weights for inspection without changing any module's return type.

Inside `with record_attention() as rec:` every `MultiHeadAttention` takes the explicit path of
`attention()` (the lecture's S = Q K^T / sqrt(d_k) + M, A = softmax_row(S)) and appends its weight
matrix A to `rec`. Outside the block nothing is recorded and the fast fused kernel is used. The active
recorder lives in a `ContextVar`, so concurrent requests in different threads do not mix records.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from torch import Tensor


@dataclass
class AttentionRecord:
    """One call of one attention module."""

    layer: int  # block index in the LM; -1 for a module used on its own
    kind: str  # "self" or "cross"
    weights: Tensor  # (B, H, Lq, Lk), detached; one normalized row per query


@dataclass
class AttentionRecorder:
    """The records written while the recorder was active, in call order."""

    records: list[AttentionRecord] = field(default_factory=list)

    def add(self, layer: int, kind: str, weights: Tensor) -> None:
        self.records.append(AttentionRecord(layer, kind, weights.detach()))

    def layers(self, kind: str = "self") -> list[int]:
        """Block indices that recorded weights of this kind, in first-seen order."""
        seen: list[int] = []
        for r in self.records:
            if r.kind == kind and r.layer not in seen:
                seen.append(r.layer)
        return seen

    def get(self, layer: int, kind: str = "self") -> Tensor:
        """Weights (B, H, Lq, Lk) of the latest call of block `layer`; raises KeyError when absent."""
        for r in reversed(self.records):
            if r.layer == layer and r.kind == kind:
                return r.weights
        raise KeyError(f"no {kind}-attention weights recorded for layer {layer}")

    def head(self, layer: int, head: int, batch: int = 0, kind: str = "self") -> Tensor:
        """The (Lq, Lk) weight matrix of one head for one batch row."""
        return self.get(layer, kind)[batch, head]


_ACTIVE: ContextVar[AttentionRecorder | None] = ContextVar("seqlab_attention_recorder", default=None)


def active_recorder() -> AttentionRecorder | None:
    """The recorder attention modules should write into, or None when recording is off."""
    return _ACTIVE.get()


@contextmanager
def record_attention() -> Iterator[AttentionRecorder]:
    """Switch recording on for the duration of the block and yield the recorder."""
    rec = AttentionRecorder()
    token = _ACTIVE.set(rec)
    try:
        yield rec
    finally:
        _ACTIVE.reset(token)
