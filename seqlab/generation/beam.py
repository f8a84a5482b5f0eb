"""Beam search over the incremental decoder of `seqlab.generation.decode`: every step is one single-token
forward pass over the live beams, whose states follow their hypotheses (`select_state`). Word-level
completion (`seqlab.generation.complete`) uses it when asked for `beam` > 1.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.generation.decode import IncrementalDecoder, StopFn, context_limit, mask_first, to_eval

__all__ = ["Hypothesis", "beam_search", "beam_search_hypotheses"]


@dataclasses.dataclass
class Hypothesis:
    """One beam-search candidate: the new token ids and the log-probability of each under the model."""

    ids: list[int]
    logps: list[float]

    @property
    def logp(self) -> float:
        """Joint log-probability of the new tokens given the prompt (nats)."""
        return float(sum(self.logps))

    def score(self, length_penalty: float = 0.0) -> float:
        """log p / len ** length_penalty: 0 ranks by joint probability, 1 by mean log-probability per
        token (a simplified form of the length normalisation of Wu et al., 2016, GNMT)."""
        return self.logp / max(1, len(self.ids)) ** length_penalty


def beam_search_hypotheses(
    model: nn.Module, prompt_ids: list[int], *, beam: int, max_new_tokens: int, eos_id: int | None = None,
    stop: StopFn | None = None, length_penalty: float = 0.0, first_allowed: Tensor | None = None,
    decoder: IncrementalDecoder | None = None, context: Any = None,
) -> list[Hypothesis]:
    """Beam search; the finished hypotheses, best score first (at most `beam` of them).

    Each step extends every live hypothesis by every token, ranks the extensions by joint log-probability
    and keeps the best `beam`; an extension ending in `eos_id`, satisfying `stop`, or reaching
    `max_new_tokens` is finished if it ranks among the best `beam`. The search ends once `beam`
    hypotheses are finished. States follow their hypotheses through `select_state`, so every step is one
    single-token forward pass over the live beams. With `decoder` (an already-encoded prompt, one lane),
    `prompt_ids` is not used.
    """
    if beam < 1:
        raise ValueError(f"beam must be at least 1, not {beam}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be 0 or more, not {max_new_tokens}")
    if not prompt_ids and decoder is None:
        raise ValueError("prompt_ids must hold at least one token (the bos token)")
    if max_new_tokens == 0:
        return [Hypothesis([], [])]
    was_training = to_eval(model)
    live, finished = [Hypothesis([], [])], []
    try:
        with torch.inference_mode():
            dec = decoder or IncrementalDecoder(model, torch.tensor([prompt_ids], dtype=torch.long),
                                                context_limit(model), context)
            for t in range(max_new_tokens):
                logits = dec.logits.cpu()  # (n_live, V)
                logp = (mask_first(logits, first_allowed) if t == 0 else logits).log_softmax(dim=-1)
                V = logp.shape[-1]
                # Joint log-probability of every extension, in float64 so ranking ties stay stable: (n_live, V).
                total = torch.tensor([h.logp for h in live], dtype=torch.float64)[:, None] + logp.double()
                vals, flat = total.flatten().topk(min(2 * beam, total.numel()))
                rows, toks, new_live = [], [], []
                for rank, (v, f) in enumerate(zip(vals.tolist(), flat.tolist())):
                    if v == float("-inf") or len(new_live) == beam:
                        break
                    r, tok = divmod(f, V)
                    h = Hypothesis(live[r].ids + [tok], live[r].logps + [float(logp[r, tok])])
                    if tok == eos_id or (stop is not None and stop(h.ids)) or t == max_new_tokens - 1:
                        if rank < beam:  # only a top-ranked extension may end the search (HF early stop)
                            finished.append(h)
                    else:
                        new_live.append(h)
                        rows.append(r)
                        toks.append(tok)
                if len(finished) >= beam or not new_live:
                    break
                live = new_live
                dec.select(torch.tensor(rows))
                dec.step(torch.tensor(toks))
    finally:
        if was_training:
            model.train()
    finished.sort(key=lambda h: h.score(length_penalty), reverse=True)
    return finished[:beam]


def beam_search(
    model: nn.Module, prompt_ids: list[int], *, beam: int, max_new_tokens: int, eos_id: int | None = None,
    stop: StopFn | None = None, length_penalty: float = 0.0, first_allowed: Tensor | None = None,
) -> list[tuple[list[int], float]]:
    """Beam search: up to `beam` (new token ids, score) pairs, best first; eos is kept in the ids.

    The score is the joint log-probability of the new tokens divided by len ** length_penalty; with the
    default length_penalty=0 it is exactly the sum of their log-probabilities, and beam=1 is greedy.
    """
    hyps = beam_search_hypotheses(model, prompt_ids, beam=beam, max_new_tokens=max_new_tokens, eos_id=eos_id,
                                  stop=stop, length_penalty=length_penalty, first_allowed=first_allowed)
    return [(h.ids, h.score(length_penalty)) for h in hyps]
