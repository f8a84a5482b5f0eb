"""Greedy proposals at many positions of many emails at once: `propose_positions`.

The saved-characters evaluation (`seqlab.evaluation.saved_chars`) asks a greedy, unthresholded proposal at
every typed character of each held-out email, tens of thousands of proposals, each of which `complete`
would make by encoding the whole prompt again and decoding one lane. `propose_positions` returns the same
`Completion`s (the same ids and text; probabilities equal up to float rounding) with two savings:

- Prefix reuse. An email's prompts grow one character at a time, and their token ids (after token healing,
  `encode_prompt`) share all but their last few tokens with the previous prompt's. A `PrefixTrunk` keeps,
  for the latest prompt of one email, the model state after each of its tokens; the next prompt goes back
  to the longest common prefix of the two id lists and feeds only the tokens after it (as
  `seqlab.serving.sessions.PromptEncoder` does for a writer's keystrokes, written again here because
  generation may not import serving). Each email's tokens are thus fed about once, plus the last word's
  tokens again where BPE re-splits a growing word.
- Lanes. The encoded prompts of up to `lanes` positions (of one email or several) are decoded together:
  their states are stacked on the batch dimension, each lane's first token is limited to its own healed
  set (`allowed`, the token-healing mask; all tokens where nothing is healed), each lane stops by its own
  `WordStop`, and a lane that has finished is dropped from the batch (`IncrementalDecoder.select`), so
  every step feeds only unfinished lanes.

Stacking states needs a state whose every tensor is per lane with no length of its own: the recurrent
mixers (RNN, GRU, minGRU) without a context window (`context_limit` None) and without a context read by
cross-attention. Any other model (attention, whose caches have per-lane lengths; learned positions, whose
window slides; a model given contexts or a phrase blend) is asked position by position through
`complete`, so its answers are `complete`'s by construction.

Equality with `complete`: the same tokens go through the same model, split into other chunks (one token at
a time instead of the whole prompt in one call) and in other batch shapes, so logits differ by float
rounding only (~1e-6); greedy choices are the same unless two tokens tie to within that rounding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.data.tokenizer import Tokenizer
from seqlab.generation.complete import Completion, complete, encode_prompt, finish
from seqlab.generation.decode import IncrementalDecoder, context_limit, to_eval
from seqlab.generation.fast_step import FastStep
from seqlab.generation.gate import FIRST_WORD, check_rule
from seqlab.generation.stops import WordStop

LANES = 64  # positions decoded together: enough to amortise a step's fixed cost, small enough for the cache
BATCHED_MIXERS = ("rnn", "gru", "mingru")


def batchable(model: nn.Module, contexts: Sequence[Any] | None) -> bool:
    """Whether `propose_positions` can stack this model's states across lanes (module doc)."""
    cfg = getattr(model, "cfg", None)
    if cfg is None or cfg.mixer not in BATCHED_MIXERS or context_limit(model) is not None:
        return False
    return contexts is None or all(c is None for c in contexts)


def stack_states(states: Sequence[Any]) -> Any:
    """One state for B lanes from B one-lane states: every tensor leaf concatenated on dim 0 (batch first).

    Leaves that are not tensors (None, ints) must be the same in every state and are kept."""
    first = states[0]
    if isinstance(first, Tensor):
        return torch.cat(list(states), dim=0)
    if isinstance(first, (list, tuple)):
        return type(first)(stack_states([s[i] for s in states]) for i in range(len(first)))
    if isinstance(first, dict):
        return {k: stack_states([s[k] for s in states]) for k in first}
    if dataclasses.is_dataclass(first) and not isinstance(first, type):
        fields = [f.name for f in dataclasses.fields(first) if f.init]
        return dataclasses.replace(first, **{n: stack_states([getattr(s, n) for s in states]) for n in fields})
    return first


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class PrefixTrunk:
    """The model state after each token of one email's latest prompt, to encode its next prompt from.

    states[n] = (state, logits (1, V)) after ids[: n + 1]. Recurrent states are new tensors at every step
    (never written in place), so keeping the one after each token costs a hidden state per token."""

    def __init__(self, model: nn.Module, fast: FastStep | None, device: torch.device) -> None:
        self.model, self.fast, self.device = model, fast, device
        self.ids: list[int] = []
        self.states: list[tuple[Any, Tensor]] = []
        self.fed = 0  # tokens run through the model, for the benchmark's count

    def encode(self, ids: list[int]) -> tuple[Any, Tensor]:
        """(state, next-token logits (1, V)) after `ids`, feeding only what differs from the last prompt."""
        p = _common_prefix(self.ids, ids)
        if p == len(ids):  # a prefix of the last prompt (or the same): its state is kept
            p = len(ids) - 1
        del self.ids[p:], self.states[p:]
        for t in ids[p:]:
            self.states.append(self._step(t, self.states[-1][0] if self.states else None))
            self.ids.append(t)
            self.fed += 1
        return self.states[len(ids) - 1]

    def _step(self, token: int, state: Any) -> tuple[Any, Tensor]:
        tokens = torch.tensor([token], dtype=torch.long, device=self.device)  # (1,)
        if state is not None and self.fast is not None and self.fast.usable(state):
            logits, state = self.fast(tokens, state)  # (1, V)
            return state, logits.float()
        out, state = self.model(tokens[:, None], state=state)  # (1, 1, V)
        return state, out[:, -1].to(torch.float32, copy=True)


@dataclass
class _Lane:
    """One position to decode: where its answer goes, its encoded prompt and its healing."""

    email: int
    slot: int
    state: Any
    logits: Tensor  # (1, V)
    allowed: Tensor | None  # (V,) bool: the healed first tokens, None for any
    skip: int


def _lanes(model: nn.Module, tokenizer: Tokenizer, texts: Sequence[str], positions: Sequence[Sequence[int]],
           stats: dict[str, int]) -> Iterator[_Lane]:
    """Every (email, position) encoded, in order, each email walked through one `PrefixTrunk`."""
    fast = FastStep.of(model)
    device = next(model.parameters()).device
    for e, (text, where) in enumerate(zip(texts, positions)):
        trunk = PrefixTrunk(model, fast, device)
        for j, i in enumerate(where):
            ids, allowed, skip = encode_prompt(tokenizer, text[:i])
            stats["prompt_tokens"] += len(ids)
            state, logits = trunk.encode(ids)
            yield _Lane(e, j, state, logits, allowed, skip)
        stats["fed_tokens"] += trunk.fed


def decode_lanes(model: nn.Module, tokenizer: Tokenizer, lanes: Sequence[_Lane], *, max_words: int,
                 stop_at_newline: bool, budget: int, sentence: bool = False) -> list[tuple[list[int], list[float]]]:
    """Greedy decoding of every lane at once: (new ids, their log-probs) per lane, as `generate_with_logprobs`
    gives for one (temperature 1 log-probs, renormalised over the healed set at the first step)."""
    dec = IncrementalDecoder.resume(model, torch.empty(0), stack_states([ln.state for ln in lanes]),
                                    torch.cat([ln.logits for ln in lanes]))
    v = dec.logits.shape[1]
    first = torch.stack([ln.allowed if ln.allowed is not None else torch.ones(v, dtype=torch.bool)
                         for ln in lanes])  # (B, V)
    stops = [WordStop(tokenizer, max_words, stop_at_newline, ln.skip, early=True, sentence=sentence) for ln in lanes]
    out: list[tuple[list[int], list[float]]] = [([], []) for _ in lanes]
    active = list(range(len(lanes)))  # the lane of each decoder row
    while active and budget > 0:
        logits = dec.logits.cpu()  # (B', V)
        if not out[active[0]][0]:  # the first step (every lane starts together)
            logits = logits.masked_fill(~first, float("-inf"))
        nxt = logits.argmax(dim=-1)  # (B',)
        logp = logits.log_softmax(dim=-1).gather(1, nxt[:, None])[:, 0]  # (B',)
        keep = []
        for row, lane in enumerate(active):
            t = int(nxt[row])
            out[lane][0].append(t)
            out[lane][1].append(float(logp[row]))
            if not (t == tokenizer.eos_id or stops[lane](out[lane][0]) or len(out[lane][0]) == budget):
                keep.append(row)
        if not keep:
            break
        if len(keep) < len(active):
            index = torch.tensor(keep)
            dec.select(index)
            nxt = nxt.index_select(0, index)
            active = [active[r] for r in keep]
        dec.step(nxt)
    return out


def propose_positions(
    model: nn.Module, tokenizer: Tokenizer, texts: Sequence[str], positions: Sequence[Sequence[int]], *,
    max_words: int, contexts: Sequence[Any] | None = None, stop_at_newline: bool = True, lanes: int = LANES,
    rule: str = FIRST_WORD, threshold: float | None = None, sentence: bool = False,
    stats: dict[str, int] | None = None,
) -> list[list[Completion]]:
    """For each email e and each offset i in positions[e], what
    `complete(model, tokenizer, texts[e][:i], temperature=0, max_words=max_words, context=contexts[e],
    rule=rule, threshold=threshold, sentence=sentence)` returns, computed with prefix reuse and in lanes (module doc).

    `stats`, when given, receives the counts a benchmark reports: prompt_tokens (what `complete` would
    encode), fed_tokens (what was encoded here), proposals."""
    if len(positions) != len(texts):
        raise ValueError(f"positions must give one list per email: {len(positions)} lists for {len(texts)} emails")
    if contexts is not None and len(contexts) != len(texts):
        raise ValueError(f"contexts must give one per email: {len(contexts)} for {len(texts)} emails")
    if max_words < 1:
        raise ValueError(f"max_words must be at least 1, not {max_words}")
    if lanes < 1:
        raise ValueError(f"lanes must be at least 1, not {lanes}")
    check_rule(rule, threshold)
    counts = stats if stats is not None else {}
    for key in ("prompt_tokens", "fed_tokens", "proposals"):
        counts.setdefault(key, 0)
    answers: list[list[Completion]] = [[Completion("")] * len(p) for p in positions]
    counts["proposals"] += sum(len(p) for p in positions)
    if not batchable(model, contexts):
        for e, (text, where) in enumerate(zip(texts, positions)):
            ctx = contexts[e] if contexts is not None else None
            for j, i in enumerate(where):
                answers[e][j] = complete(model, tokenizer, text[:i], max_words=max_words, temperature=0.0,
                                         context=ctx, rule=rule, threshold=threshold, sentence=sentence)
                counts["prompt_tokens"] += len(encode_prompt(tokenizer, text[:i])[0])
        counts["fed_tokens"] = counts["prompt_tokens"]
        return answers
    budget = 16 * max_words + 8  # complete's default max_new_tokens
    was_training = to_eval(model)
    try:
        with torch.inference_mode():
            batch: list[_Lane] = []
            for lane in _lanes(model, tokenizer, texts, positions, counts):
                batch.append(lane)
                if len(batch) == lanes:
                    _finish_batch(model, tokenizer, batch, answers, max_words, stop_at_newline, budget, rule,
                                  threshold, sentence)
                    batch = []
            if batch:
                _finish_batch(model, tokenizer, batch, answers, max_words, stop_at_newline, budget, rule, threshold,
                              sentence)
    finally:
        if was_training:
            model.train()
    return answers


def _finish_batch(model: nn.Module, tokenizer: Tokenizer, batch: list[_Lane], answers: list[list[Completion]],
                  max_words: int, stop_at_newline: bool, budget: int, rule: str, threshold: float | None,
                  sentence: bool) -> None:
    """Decode `batch` and write each lane's `Completion` into `answers`."""
    decoded = decode_lanes(model, tokenizer, batch, max_words=max_words, stop_at_newline=stop_at_newline,
                           budget=budget, sentence=sentence)
    for lane, (ids, logps) in zip(batch, decoded):
        answers[lane.email][lane.slot] = finish(tokenizer, ids, logps, skip=lane.skip, max_words=max_words,
                                                stop_at_newline=stop_at_newline, threshold=threshold, rule=rule,
                                                sentence=sentence)
