"""Encoding the growing prompts of many emails at once, each from its previous prompt's state.

An email typed letter by letter asks for a proposal after every character. Its prompts' token ids (after
token healing, `encode_prompt`) share all but their last few tokens with the previous prompt's, so each
email keeps a `PrefixTrunk`: the state after each token of its latest prompt. The next prompt goes back to
the longest common prefix of the two id lists and feeds only the tokens after it (as
`seqlab.serving.sessions.PromptEncoder` does for a writer's keystrokes; written again here because
generation may not import serving). Each email's tokens are thus fed about once, plus the last word's
tokens again where BPE re-splits a growing word.

`encode_rounds` walks up to `width` emails side by side: each round, every open email takes its next
position, and the tokens each must feed are fed in lockstep, one batched step per token index (an email
with fewer new tokens sits the later steps out). A state is not copied out lane by lane: a trunk keeps a
`Row` (a batch's state and logits, and its row in them), and `gather_rows` picks the rows the next step
or the decoder needs with one `index_select` per tensor of each batch they come from.

Only for states whose every tensor is per lane, batch first, and never written in place (the recurrent
mixers: RNN, GRU, minGRU; `seqlab.generation.batched.batchable`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.data.tokenizer import Tokenizer
from seqlab.generation.complete import encode_prompt
from seqlab.generation.decode import model_device, select_state
from seqlab.generation.fast_step import FastStep


def stack_states(states: Sequence[Any]) -> Any:
    """One state for the lanes of several states: every tensor leaf concatenated on dim 0 (batch first).

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


@dataclass(frozen=True)
class Row:
    """One lane's state and next-token logits: row `row` of a batch's `state` and `logits` (B, V)."""

    state: Any
    logits: Tensor
    row: int


def gather_rows(rows: Sequence[Row]) -> tuple[Any, Tensor, list[int]]:
    """(state, logits (B', V), order): the given rows as one batch, row k of it being rows[order[k]] (rows
    from one batch are taken together, in one index_select per tensor)."""
    groups: dict[int, list[int]] = {}
    for k, r in enumerate(rows):
        groups.setdefault(id(r.state), []).append(k)
    states, logits, order = [], [], []
    for ks in groups.values():
        src = rows[ks[0]]
        index = torch.tensor([rows[k].row for k in ks], device=src.logits.device)
        states.append(select_state(src.state, index))
        logits.append(src.logits.index_select(0, index))
        order += ks
    if len(states) == 1:
        return states[0], logits[0], order
    return stack_states(states), torch.cat(logits), order


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two id lists."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class PrefixTrunk:
    """One email's latest prompt: its ids and rows[n], the state and logits after ids[: n + 1]."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.rows: list[Row] = []

    def pending(self, ids: list[int]) -> list[int]:
        """Go back to the longest prefix of `ids` already encoded; the tokens still to feed after it (at least
        one when nothing is kept: the logits after the last token come from feeding it)."""
        p = common_prefix(self.ids, ids)
        if p == len(ids):  # the same prompt, or a prefix of the last: its state is kept
            p = len(ids) - 1
        del self.ids[p:], self.rows[p:]
        return ids[p:]


def feed_step(model: nn.Module, fast: FastStep | None, trunks: Sequence[PrefixTrunk], tokens: Sequence[int]) -> None:
    """Feed tokens[k] to trunks[k] for every k in one batched step; a trunk with no state starts one."""
    device = model_device(model)
    starting = [not t.rows for t in trunks]  # decided before feeding: a fed trunk has rows
    for fresh in (True, False):
        ks = [k for k, s in enumerate(starting) if s == fresh]
        if not ks:
            continue
        if fresh:
            state, order = None, ks
        else:
            state, _, at = gather_rows([trunks[k].rows[-1] for k in ks])
            order = [ks[a] for a in at]
        idx = torch.tensor([tokens[k] for k in order], dtype=torch.long, device=device)  # (B',)
        if state is not None and fast is not None and fast.usable(state):
            logits, state = fast(idx, state)  # (B', V)
            logits = logits.float()
        else:
            out, state = model(idx[:, None], state=state)  # (B', 1, V)
            logits = out[:, -1].float()
        for r, k in enumerate(order):
            trunks[k].rows.append(Row(state, logits, r))
            trunks[k].ids.append(tokens[k])


@dataclass
class Encoded:
    """One position of one email, encoded: where its answer goes, its state's row, and its healing."""

    email: int
    slot: int
    row: Row
    allowed: Tensor | None  # (V,) bool: the healed first tokens, None for any
    skip: int


def encode_rounds(model: nn.Module, tokenizer: Tokenizer, texts: Sequence[str], positions: Sequence[Sequence[int]],
                  width: int, stats: dict[str, int]) -> Iterator[list[Encoded]]:
    """Each round's encoded positions, up to `width` emails side by side (module doc); an email that has
    had all its positions makes room for the next. `stats` counts prompt_tokens (what encoding every prompt
    from scratch would feed) and fed_tokens."""
    fast = FastStep.of(model)
    queue = iter([e for e in range(len(texts)) if positions[e]])
    open_: list[tuple[int, PrefixTrunk]] = []
    slot = [0] * len(texts)
    while True:
        while len(open_) < width and (e := next(queue, None)) is not None:
            open_.append((e, PrefixTrunk()))
        if not open_:
            return
        prompts = [encode_prompt(tokenizer, texts[e][: positions[e][slot[e]]]) for e, _ in open_]
        todo = [trunk.pending(ids) for (_, trunk), (ids, _, _) in zip(open_, prompts)]
        stats["prompt_tokens"] += sum(len(ids) for ids, _, _ in prompts)
        stats["fed_tokens"] += sum(map(len, todo))
        for s in range(max(map(len, todo))):
            ks = [k for k, t in enumerate(todo) if len(t) > s]
            feed_step(model, fast, [open_[k][1] for k in ks], [todo[k][s] for k in ks])
        yield [Encoded(e, slot[e], trunk.rows[len(ids) - 1], allowed, skip)
               for (e, trunk), (ids, allowed, skip) in zip(open_, prompts)]
        for e, _ in open_:
            slot[e] += 1
        open_ = [(e, t) for e, t in open_ if slot[e] < len(positions[e])]
