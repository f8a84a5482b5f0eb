"""A model fed one token at a time, as incremental decoding feeds it, for tests against the full pass."""

from __future__ import annotations

from typing import Any

import torch

from seqlab.generation.decode import IncrementalDecoder


def one_token_at_a_time(model: Any, idx: torch.Tensor, context: Any = None) -> tuple[torch.Tensor, Any]:
    """(logits (B, T, V) of T single-token calls, the last state); the context goes with the first call."""
    state, steps = None, []
    with torch.no_grad():
        for t in range(idx.size(1)):
            logits, state = model(idx[:, t : t + 1], state=state, context=context if t == 0 else None)
            steps.append(logits)
    return torch.cat(steps, dim=1), state


def decoder_against_full(model: Any, prompt: torch.Tensor, context: Any, start: int = 3) -> None:
    """The IncrementalDecoder's last logits, fed `prompt` from position `start` on, equal the full pass's."""
    with torch.no_grad():
        full, _ = model(prompt, context=context)
        dec = IncrementalDecoder(model, prompt[:, :start], context=context)
        for t in range(start, prompt.size(1)):
            dec.step(prompt[:, t])
    torch.testing.assert_close(dec.logits, full[:, -1].float(), atol=1e-5, rtol=1e-5)
