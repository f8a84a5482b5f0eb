"""Sequence models: the LM shell (`build_model`, `MIXERS`), attention, positions and recurrent mixers.

Every model is `model(idx (B, T), state=None, context=None, reset=None) -> (logits (B, T, V), state)`.
The package re-exports only the shell and the attention recorder; everything else is imported from its
module (`from seqlab.models.attention import attention`), so that each submodule stays reachable by its
name (`import seqlab.models.attention as A` gives the module, never a function of the same name).
Recurrent mixers live in `rnn.py` / `mingru.py` and are imported only when a model needs them.
"""

from seqlab.models.lm import LM, MIXERS, LMState, build_model
from seqlab.models.recorder import AttentionRecorder, record_attention

__all__ = ["LM", "MIXERS", "AttentionRecorder", "LMState", "build_model", "record_attention"]
