"""Greedy proposals at many positions of many emails at once: `propose_positions`.

The saved-characters evaluation (`seqlab.evaluation.saved_chars`) asks a greedy, unthresholded proposal at
every typed character of each held-out email, tens of thousands of proposals, each of which `complete`
would make by encoding the whole prompt again and decoding one lane. `propose_positions` returns the same
`Completion`s (the same ids and text; probabilities equal up to float rounding) with two savings:

- Prefix reuse. An email's prompts grow one character at a time and share all but their last few tokens
  with the previous prompt's; each email keeps the state after each token of its latest prompt and feeds
  only the tokens past the common prefix, many emails side by side (`seqlab.generation.prefix_lanes`).
- Lanes. The encoded prompts of up to `lanes` positions (of one email or several) are decoded together:
  their states are stacked on the batch dimension, each lane's first token is limited to its own healed
  set (`allowed`, the token-healing mask; all tokens where nothing is healed), each lane stops by its own
  `WordStop`, and a lane that has finished is dropped from the batch (`IncrementalDecoder.select`), so
  every step feeds only unfinished lanes.

Stacking states needs a state whose every tensor is per lane with no length of its own: the recurrent
mixers (RNN, GRU, minGRU) without a context window (`context_limit` None) and without a context read by
cross-attention. Any other model is asked position by position (`one_by_one`): attention, whose caches
have per-lane lengths, still goes back along its key/value cache to the common prefix of consecutive
prompts and feeds only the rest; the others (learned positions, whose window slides; a recurrent model
given contexts) encode each prompt as `complete` does.

Equality with `complete`: the same tokens go through the same model, split into other chunks (one token at
a time instead of the whole prompt in one call) and in other batch shapes, so logits differ by float
rounding only (~1e-6); greedy choices are the same unless two tokens tie to within that rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from seqlab.data.tokenizer import Tokenizer
from seqlab.generation.complete import Completion, complete_encoded, encode_prompt, finish, token_budget
from seqlab.generation.decode import IncrementalDecoder, context_limit, model_device, to_eval
from seqlab.generation.gate import FIRST_WORD, check_rule
from seqlab.generation.phrases import PhraseBlend, PhraseModel
from seqlab.generation.prefix_lanes import Encoded, common_prefix, encode_rounds, gather_rows
from seqlab.generation.stops import WordStop
from seqlab.models.lm import LM

LANES = 64  # positions decoded together: enough to amortise a step's fixed cost, small enough for the cache
BATCHED_MIXERS = ("rnn", "gru", "mingru")


def batchable(model: nn.Module, contexts: Sequence[Any] | None) -> bool:
    """Whether `propose_positions` can stack this model's states across lanes (module doc)."""
    if not isinstance(model, LM) or model.cfg.mixer not in BATCHED_MIXERS or context_limit(model) is not None:
        return False  # a wrapper (the phrase blend) keeps a state of its own
    return contexts is None or all(c is None for c in contexts)


def decode_lanes(model: nn.Module, tokenizer: Tokenizer, lanes: Sequence[Encoded], *, max_words: int,
                 stop_at_newline: bool, budget: int, sentence: bool = False) -> list[tuple[list[int], list[float]]]:
    """Greedy decoding of every lane at once: (new ids, their log-probs) per lane, as `generate_with_logprobs`
    gives for one (temperature 1 log-probs, renormalised over the healed set at the first step), in the
    order of `lanes`."""
    state, logits, order = gather_rows([ln.row for ln in lanes])
    lanes = [lanes[k] for k in order]  # the decoder's row order
    dec = IncrementalDecoder.resume(model, torch.empty(0), state, logits)
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
    back: list[tuple[list[int], list[float]]] = [([], [])] * len(lanes)
    for k, decoded in zip(order, out):
        back[k] = decoded
    return back


def propose_positions(
    model: nn.Module, tokenizer: Tokenizer, texts: Sequence[str], positions: Sequence[Sequence[int]], *,
    max_words: int, contexts: Sequence[Any] | None = None, stop_at_newline: bool = True, lanes: int = LANES,
    rule: str = FIRST_WORD, threshold: float | None = None, sentence: bool = False,
    phrases: PhraseModel | None = None, stats: dict[str, int] | None = None,
) -> list[list[Completion]]:
    """For each email e and each offset i in positions[e], what
    `complete(model, tokenizer, texts[e][:i], temperature=0, max_words=max_words, context=contexts[e],
    rule=rule, threshold=threshold, sentence=sentence, phrases=phrases)` returns, computed with prefix reuse
    and in lanes (module doc).

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
    if phrases is not None:  # the blend's state is its own: asked one by one (`one_by_one`)
        model = PhraseBlend(model, phrases)
    counts = stats if stats is not None else {}
    for key in ("prompt_tokens", "fed_tokens", "proposals"):
        counts.setdefault(key, 0)
    answers: list[list[Completion]] = [[Completion("")] * len(p) for p in positions]
    counts["proposals"] += sum(len(p) for p in positions)
    if not batchable(model, contexts):
        one_by_one(model, tokenizer, texts, positions, contexts, answers, counts, max_words=max_words,
                   stop_at_newline=stop_at_newline, rule=rule, threshold=threshold, sentence=sentence)
        return answers
    budget = token_budget(max_words, sentence)  # complete's default max_new_tokens
    was_training = to_eval(model)
    try:
        with torch.inference_mode():
            batch: list[Encoded] = []
            for encoded in encode_rounds(model, tokenizer, texts, positions, lanes, counts):
                batch += encoded
                while len(batch) >= lanes:
                    _finish_batch(model, tokenizer, batch[:lanes], answers, max_words, stop_at_newline, budget, rule,
                                  threshold, sentence)
                    batch = batch[lanes:]
            if batch:
                _finish_batch(model, tokenizer, batch, answers, max_words, stop_at_newline, budget, rule, threshold,
                              sentence)
    finally:
        if was_training:
            model.train()
    return answers


def _finish_batch(model: nn.Module, tokenizer: Tokenizer, batch: list[Encoded], answers: list[list[Completion]],
                  max_words: int, stop_at_newline: bool, budget: int, rule: str, threshold: float | None,
                  sentence: bool) -> None:
    """Decode `batch` and write each lane's `Completion` into `answers`."""
    decoded = decode_lanes(model, tokenizer, batch, max_words=max_words, stop_at_newline=stop_at_newline,
                           budget=budget, sentence=sentence)
    for lane, (ids, logps) in zip(batch, decoded):
        answers[lane.email][lane.slot] = finish(tokenizer, ids, logps, skip=lane.skip, max_words=max_words,
                                                stop_at_newline=stop_at_newline, threshold=threshold, rule=rule,
                                                sentence=sentence)


def one_by_one(model: nn.Module, tokenizer: Tokenizer, texts: Sequence[str], positions: Sequence[Sequence[int]],
               contexts: Sequence[Any] | None, answers: list[list[Completion]], counts: dict[str, int],
               **options: Any) -> None:
    """Each position through `complete_encoded` (greedy; `options` are its word, rule and sentence options),
    writing `answers`. A model whose every layer is attention goes back along its key/value cache to the
    common prefix of consecutive prompts (`LMState.truncated`, as the server's `PromptEncoder` does) and
    feeds only the rest, while the prompt fits its window (a longer one is encoded as `complete` does: its
    last `limit` tokens from scratch); any other model encodes every prompt."""
    truncatable = isinstance(model, LM) and model.cfg.mixer == "attention"
    limit, device = context_limit(model), model_device(model)
    was_training = to_eval(model)
    try:
        with torch.inference_mode():
            for e, (text, where) in enumerate(zip(texts, positions)):
                ctx = contexts[e] if contexts is not None else None
                kept_ids: list[int] = []
                kept: Any = None
                for j, i in enumerate(where):
                    ids, allowed, skip = encode_prompt(tokenizer, text[:i])
                    counts["prompt_tokens"] += len(ids)
                    decoder = None
                    if truncatable and (limit is None or len(ids) <= limit):
                        q = min(common_prefix(kept_ids, ids), len(ids) - 1)  # feed at least the last token
                        state = kept.truncated(q) if kept is not None and q >= 1 else None
                        q = q if state is not None else 0
                        extra = {"context": ctx.to(device)} if ctx is not None and state is None else {}
                        out, kept = model(torch.tensor([ids[q:]], device=device), state=state, **extra)  # (1, T, V)
                        kept_ids = ids
                        counts["fed_tokens"] += len(ids) - q
                        decoder = IncrementalDecoder.resume(model, torch.tensor([ids], device=device), kept,
                                                            out[:, -1].float(), limit, context=ctx)
                    else:
                        counts["fed_tokens"] += len(ids)
                    answers[e][j] = complete_encoded(model, tokenizer, ids, allowed, skip, temperature=0.0,
                                                     decoder=decoder, context=ctx, **options)
    finally:
        if was_training:
            model.train()
