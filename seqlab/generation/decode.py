"""Decoding from a trained next-token model: greedy, temperature, top-k and top-p sampling (beam search,
on the same incremental decoder, is in `seqlab.generation.beam`).

Every decoder here is incremental (ARCHITECTURE.md, "The model"): the prompt goes through the model once,
then each new token is fed alone together with the `state` the model returned (RNN/GRU hidden state, minGRU
last state, attention key/value cache), so generating n tokens costs n single-token forward passes,
never a re-run over the growing sequence. Those steps go through `seqlab.generation.fast_step` when it
knows the model (the same arithmetic without most of the per-call overhead), else through the model.

Attention models (and any model with learned positions) see at most `block_size` tokens of context:
that is the longest window attention was trained on, and with learned positions there is no embedding
for position `block_size`. When feeding
one more token would overflow the window, the decoder drops the cache and re-encodes the last
`block_size // 2` tokens from scratch (a sliding window). One re-encode of block_size/2 tokens happens
every block_size/2 new tokens, so the cost per generated token stays bounded and the total cost stays
linear in the output length. Other recurrent models have no limit: their state summarises everything.

Word-level completions built on these decoders (`complete`, `Completion`) live in `seqlab.generation.complete`;
loading a run folder (`load_run`) lives in `seqlab.runs.load`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.generation.fast_step import FastStep

StopFn = Callable[[list[int]], bool]
BoundFn = Callable[[list[int], list[float]], bool]  # a stop that also reads the new tokens' log-probs


def select_state(state: Any, index: Tensor) -> Any:
    """Pick rows of a model state along the batch dimension: `index` (B',) int64 -> a state for B' lanes.

    A state is nested tuples / lists / dicts / dataclasses of tensors whose first dimension is the batch;
    other leaves (None, ints such as a cache position) are shared by every lane and kept as they are.
    Beam search uses this to follow each surviving hypothesis back to the lane it came from.
    """
    if isinstance(state, Tensor):
        return state.index_select(0, index.to(state.device))
    if hasattr(state, "index_select"):  # seqlab.models.LMState reorders its own lanes
        return state.index_select(index)
    if isinstance(state, dict):
        return {k: select_state(v, index) for k, v in state.items()}
    if isinstance(state, tuple) and hasattr(state, "_fields"):  # a NamedTuple keeps its type
        return type(state)(*(select_state(v, index) for v in state))
    if isinstance(state, (tuple, list)):
        return type(state)(select_state(v, index) for v in state)
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        changes = {f.name: select_state(getattr(state, f.name), index) for f in dataclasses.fields(state)
                   if f.init}
        return dataclasses.replace(state, **changes)
    return state


def context_limit(model: nn.Module) -> int | None:
    """The longest context the model may see at once, or None when unlimited.

    `block_size` for attention (its training windows) and for any model with learned positions (no
    vector exists for position block_size); None for recurrent models with other positions.
    """
    cfg = getattr(model, "cfg", None)
    if cfg is None:
        return None
    if cfg.mixer == "attention" or cfg.pos == "learned":
        return int(cfg.block_size)
    return None


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's parameters (CPU for a parameter-free module)."""
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


class IncrementalDecoder:
    """Next-token logits for B sequences that grow in lockstep, fed one token at a time with the state.

    `logits` (B, V) float32 always holds the distribution over the next token. `window` (B, W) keeps the
    tokens inside the current attention window (only when the model has a context limit), so they can
    be re-encoded when the window slides.
    """

    def __init__(self, model: nn.Module, prompts: Tensor, limit: int | None = None, context: Any = None) -> None:
        """context: what the model reads through cross-attention (a `seqlab.models.context_encoder.ContextBatch`
        for one lane or for each), given again whenever the window is re-encoded; None without one."""
        if prompts.ndim != 2 or prompts.shape[1] == 0:
            raise ValueError(f"prompts must be a non-empty (B, T) tensor of token ids, "
                             f"got shape {tuple(prompts.shape)}")
        self.model = model
        self.limit = limit
        self.fast = FastStep.of(model)
        self.context = context.to(model_device(model)) if context is not None else None
        self.state: Any = None
        self.window: Tensor | None = None
        self.logits = self._encode(prompts.to(model_device(model)))

    @classmethod
    def resume(cls, model: nn.Module, window: Tensor, state: Any, logits: Tensor,
               limit: int | None = None, context: Any = None, fast: FastStep | None = None) -> IncrementalDecoder:
        """A decoder whose prompt is already encoded: `state` and next-token `logits` (B, V) after the
        tokens `window` (B, W), the tokens inside the attention window (W <= limit when there is one).

        The caller keeps ownership of what it passes: the decoder steps a clone of `state` (attention
        caches are written in place), so the same encoded prompt can be resumed again (a server keeps
        one per writer and reuses it at the next keystroke). `fast`: the model's `FastStep`, when the caller
        keeps one (a server, whose model does not change); else it is made here."""
        if limit is not None and window.shape[1] > limit:
            raise ValueError(f"the encoded window holds {window.shape[1]} tokens, more than the limit {limit}")
        dec = cls.__new__(cls)
        dec.model, dec.limit = model, limit
        dec.fast = fast if fast is not None else FastStep.of(model)
        dec.context = context.to(model_device(model)) if context is not None else None
        dec.state = state.clone() if hasattr(state, "clone") else state
        dec.window = window if limit is not None else None
        dec.logits = logits.float()
        return dec

    def _encode(self, idx: Tensor) -> Tensor:
        """Run the model from scratch over the last `limit` tokens of idx (B, T); return (B, V)."""
        if self.limit is not None:
            idx = idx[:, -self.limit:]
            self.window = idx
        if self.context is None:
            logits, self.state = self.model(idx, state=None)  # (B, T, V)
        else:  # the context once per lane: a beam's lanes all read the one context of the prompt
            logits, self.state = self.model(idx, state=None, context=self.context.expand(idx.size(0)))
        return logits[:, -1].float()

    def step(self, tokens: Tensor) -> Tensor:
        """Feed one token per lane, tokens (B,) -> next-token logits (B, V)."""
        tokens = tokens.to(self.logits.device).view(-1, 1)  # (B,) -> (B, 1), on the model's device
        if self.limit is not None:
            assert self.window is not None
            grown = torch.cat([self.window, tokens], dim=1)  # (B, W+1)
            if grown.shape[1] > self.limit:
                # The window is full: re-encode the last block_size // 2 tokens (see module docstring).
                self.logits = self._encode(grown[:, -max(1, self.limit // 2):])
                return self.logits
            self.window = grown
        if self.fast is not None and self.fast.usable(self.state):
            logits, self.state = self.fast(tokens[:, 0], self.state)  # (B, V): the model's step, less overhead
            self.logits = logits.float()
            return self.logits
        logits, self.state = self.model(tokens, state=self.state)  # (B, 1, V)
        self.logits = logits[:, -1].float()
        return self.logits

    def select(self, index: Tensor) -> None:
        """Keep lanes `index` (B',) in that order: the state, the window and the current logits."""
        index = index.to(self.logits.device)
        self.state = select_state(self.state, index)
        if self.window is not None:
            self.window = self.window.index_select(0, index)
        self.logits = self.logits.index_select(0, index)


def filter_logits(logits: Tensor, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Mask (B, V) logits to -inf outside the top-k tokens and outside the nucleus of mass top_p.

    Top-p keeps the smallest set of most likely tokens whose probability sums to at least p (Holtzman
    et al., 2020, "The Curious Case of Neural Text Degeneration"); the most likely token always stays.
    """
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1): the k-th largest logit
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (B, V)
        probs = sorted_logits.softmax(dim=-1)
        # Mass strictly before each token: a token is kept while the mass before it is below p.
        before = probs.cumsum(dim=-1) - probs
        drop_sorted = before >= top_p
        drop_sorted[:, 0] = False
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _check_sampling(max_new_tokens: int, temperature: float, top_k: int | None, top_p: float | None,
                    greedy: bool) -> None:
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be 0 or more, not {max_new_tokens}")
    if not greedy and temperature <= 0:
        raise ValueError(f"temperature must be positive when sampling, not {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be at least 1, not {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], not {top_p}")


def to_eval(model: nn.Module) -> bool:
    """Switch the model to eval mode; whether it was training (to switch back after). A model already in
    eval mode is left alone: `eval()` walks every submodule, a cost a server would pay at each keystroke."""
    if not model.training:
        return False
    model.eval()
    return True


def mask_first(logits: Tensor, first_allowed: Tensor | None) -> Tensor:
    """Restrict the first generated token to `first_allowed` (V,) bool (token healing: `generation.complete`)."""
    if first_allowed is None:
        return logits
    return logits.masked_fill(~first_allowed.to(logits.device), float("-inf"))


def generate_with_logprobs(
    model: nn.Module, prompt_ids: list[int], *, max_new_tokens: int, temperature: float = 1.0,
    top_k: int | None = None, top_p: float | None = None, greedy: bool = False, seed: int | None = None,
    stop: StopFn | None = None, eos_id: int | None = None, first_allowed: Tensor | None = None,
    decoder: IncrementalDecoder | None = None, context: Any = None, bound: BoundFn | None = None,
) -> tuple[list[int], list[float]]:
    """`generate`, also returning each new token's log-probability under the model's own distribution
    (temperature 1, no top-k/top-p filter; renormalised over `first_allowed` at the first step).
    With `decoder` (an already-encoded prompt, `IncrementalDecoder.resume`), `prompt_ids` is not used;
    `context` is read through cross-attention (`IncrementalDecoder`). `bound(new_ids, their log-probs)`,
    when given, is a second stop that also reads the log-probs (`seqlab.generation.stops.ValueStop`)."""
    _check_sampling(max_new_tokens, temperature, top_k, top_p, greedy)
    if not prompt_ids and decoder is None:
        raise ValueError("prompt_ids must hold at least one token (the bos token)")
    gen = torch.Generator(device="cpu")
    if seed is None:
        gen.seed()
    else:
        gen.manual_seed(seed)
    was_training = to_eval(model)
    out: list[int] = []
    logps: list[float] = []
    try:
        with torch.inference_mode():
            dec = decoder or IncrementalDecoder(model, torch.tensor([prompt_ids], dtype=torch.long),
                                                context_limit(model), context)
            while len(out) < max_new_tokens:
                # Sampling on the CPU with our own generator: the same seed gives the same tokens on any device.
                logits = dec.logits.cpu()  # (1, V)
                if not out:
                    logits = mask_first(logits, first_allowed)
                if greedy:
                    nxt = int(logits.argmax(dim=-1))
                else:
                    probs = filter_logits(logits / temperature, top_k, top_p).softmax(dim=-1)  # (1, V)
                    nxt = int(torch.multinomial(probs, 1, generator=gen))
                out.append(nxt)
                logps.append(float(logits.log_softmax(dim=-1)[0, nxt]))
                if (nxt == eos_id or (stop is not None and stop(out)) or len(out) == max_new_tokens
                        or (bound is not None and bound(out, logps))):
                    break
                dec.step(torch.tensor([nxt]))
    finally:
        if was_training:
            model.train()
    return out, logps


def generate(
    model: nn.Module, prompt_ids: list[int], *, max_new_tokens: int, temperature: float = 1.0,
    top_k: int | None = None, top_p: float | None = None, greedy: bool = False, seed: int | None = None,
    stop: StopFn | None = None, eos_id: int | None = None, first_allowed: Tensor | None = None,
) -> list[int]:
    """Continue `prompt_ids` by up to `max_new_tokens` tokens; return only the new ones.

    Greedy takes the most likely token; otherwise the logits are divided by `temperature`, filtered by
    `top_k` and `top_p`, and sampled with a private `torch.Generator` seeded by `seed` (reproducible; a
    fresh random seed when None), so top_k=1 equals greedy. Generation ends after `eos_id` (which is
    included in the result) or as soon as `stop(new_ids)` is true (the last token is kept).
    """
    ids, _ = generate_with_logprobs(
        model, prompt_ids, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
        top_p=top_p, greedy=greedy, seed=seed, stop=stop, eos_id=eos_id, first_allowed=first_allowed)
    return ids
