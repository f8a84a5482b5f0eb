"""Sequence models: the LM shell (`build_model`, `MIXERS`), attention, positions and recurrent mixers.

Every model is `model(idx (B, T), state=None, context=None, reset=None) -> (logits (B, T, V), state)`.
Recurrent mixers live in `rnn.py` / `mingru.py` and are imported only when a model needs them.
"""

from seqlab.models.attention import (
    CrossKV,
    KVCache,
    MultiHeadAttention,
    attention,
    causal_mask,
    document_mask,
    stable_softmax,
)
from seqlab.models.lm import LM, MIXERS, LMState, build_model
from seqlab.models.positional import PositionHandler, attention_positions, build_positions
from seqlab.models.recorder import AttentionRecorder, record_attention

__all__ = [
    "LM",
    "MIXERS",
    "AttentionRecorder",
    "CrossKV",
    "KVCache",
    "LMState",
    "MultiHeadAttention",
    "PositionHandler",
    "attention",
    "attention_positions",
    "build_model",
    "build_positions",
    "causal_mask",
    "document_mask",
    "record_attention",
    "stable_softmax",
]
