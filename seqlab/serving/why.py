"""Why the model suggested what it did: what it looked at before the first token of a suggestion.

`explain(model, tokenizer, subject, prefix, suggestion)` answers `POST /v1/why` (see `seqlab.serving.app`)
with a JSON-able dict. The prompt is built exactly as `CompletionEngine` builds it (`engine.prompt_text`,
token healing by `encode_prompt`, the window cut by `sessions.window_start`), so every weight is over the
tokens the model actually saw; the first suggested token is predicted at the last of them.

- Attention models: the attention row of that last token in every layer, averaged over heads, read from
  `seqlab.inspection.probes.attention_maps_of_ids` (which records it with `record_attention`).
  Each layer's row sums to 1 over the seen tokens; the overall weight is the mean over layers.
- GRU models: 1 - z, the update gate's openness, averaged over channels, for each of the last `recent`
  tokens (`probes.gru_gates_of_ids`, continuing from the state after the tokens before them): how much of
  its state the model rewrote at that token (high) rather than kept (low). Lecture: "GRU gates mix
  retained state with candidate content", h_t = (1 - z) n + z h_{t-1}.
- RNN and minGRU models: the probes have no per-position view of them; only the alternatives are given.

For every family: the top-5 next tokens at the first suggested position with their probabilities (the
softmax of the model's logits there, renormalised over space-led tokens when the prompt was healed, as the
decoder does) and the likeliest token consistent with the suggestion's text, with its rank.

A suggestion that did not come from the model is explained by its source instead (`told_by_source`): the
person's own earlier mail (`generation.memory`), naming the email (its subject and date) to the compose
page only, or the message being answered (`generation.reply_copy`). The engine remembers each suggestion's
source by its id (`CompletionEngine.explained`); without an id, a suggestion the memory gives again for the
same email is taken to be the memory's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from seqlab.data.tokenizer import Tokenizer
from seqlab.generation.complete import encode_prompt
from seqlab.generation.decode import model_device
from seqlab.inspection import probes
from seqlab.serving.engine import CompletionEngine, prompt_text
from seqlab.serving.sessions import serve_limit, window_start

TOP_POSITIONS = 8  # positions listed, by weight
ALTERNATIVES = 5  # next tokens listed, by probability
RECENT = 40  # tokens whose GRU gates are read: the end of the prompt, where the state was last shaped
CONTEXT_CHARS = 200  # characters of the prompt's end shown with the top positions shaded
SNIPPET_CHARS = 12  # characters on each side of a top position


@dataclass
class Seen:
    """The prompt as the model saw it when it chose the first suggested token: the window's ids, where
    the window starts in the prompt's ids, the healing of `encode_prompt` (allowed first tokens or None,
    bytes of the generation the writer already typed) and the characters of the prompt before the window."""

    ids: list[int]
    start: int
    allowed: Tensor | None
    skip: int
    chars_before: int
    healed: bool


def seen_prompt(model: nn.Module, tokenizer: Tokenizer, subject: str, prefix: str) -> Seen:
    """Encode subject and body as `CompletionEngine.complete` does and keep the window the model sees.

    When healing leaves one allowed first token (the byte tokenizer: the space itself), the decoder's
    first step is forced and carries no byte of the suggestion; it is fed as the decoder feeds it
    (`IncrementalDecoder.step`: a full window is re-encoded from its last half), and the window is the
    one the first token of the suggestion is chosen after."""
    ids, allowed, skip = encode_prompt(tokenizer, prompt_text(subject, prefix))
    limit = serve_limit(model)  # the tail the server feeds: a long body never reruns whole
    start = window_start(len(ids), limit)
    healed = allowed is not None
    if allowed is not None and int(allowed.sum()) == 1:
        forced = int(allowed.nonzero()[0, 0])
        skip = max(0, skip - len(tokenizer.token_bytes(forced)))
        ids, allowed = [*ids, forced], None
        if limit is not None and len(ids) - start > limit:
            start = len(ids) - max(1, limit // 2)
    cut = b"".join(tokenizer.token_bytes(i) for i in ids[1:start])  # ids[0] is bos: no text
    return Seen(ids[start:], start, allowed, skip, len(cut.decode("utf-8", errors="ignore")), healed)


def attention_weights(model: nn.Module, tokenizer: Tokenizer, ids: list[int]) -> np.ndarray:
    """(n_layer, W): the last token's attention over the W ids in each layer, averaged over heads."""
    maps = probes.attention_maps_of_ids(model, tokenizer, ids)
    rows = [np.mean([maps.weights[(layer, h)][-1] for h in maps.heads], axis=0) for layer in maps.layers]
    return np.stack(rows).astype(np.float64)


def _split_feed(model: nn.Module, ids: list[int], recent: int) -> tuple[int, Any, Tensor]:
    """Run ids through the model's fast path in two parts, before and within the last `recent` tokens:
    (where the second part starts, the state before it, the next-token logits (V,) after all of ids)."""
    split = max(0, len(ids) - recent)
    device = model_device(model)
    state = None
    with torch.no_grad():
        if split:
            _, state = model(torch.tensor([ids[:split]], device=device), state=None)  # (1, split) -> state
        before = state.clone() if hasattr(state, "clone") else state
        logits, _ = model(torch.tensor([ids[split:]], device=device), state=state)  # (1, T, V)
    return split, before, logits[0, -1].float()


def gate_rewrites(model: nn.Module, tokenizer: Tokenizer, ids: list[int], split: int, state: Any) -> np.ndarray:
    """(GRU layers, len(ids) - split): 1 - mean_c z_t for ids[split:], continuing from `state`."""
    rows = []
    for layer in range(len(probes.gru_layers(model))):
        before = state.clone() if hasattr(state, "clone") else state
        _, _, z = probes.gru_gates_of_ids(model, tokenizer, ids[split:], layer, before)  # z (T, C)
        rows.append(1.0 - z.astype(np.float64).mean(axis=1))
    return np.stack(rows)


def next_token_probs(logits: Tensor, allowed: Tensor | None) -> Tensor:
    """(V,) float64 probabilities of the first suggested token, as the decoder draws it."""
    logits = logits.double()
    if allowed is not None:
        logits = logits.masked_fill(~allowed.to(logits.device), float("-inf"))
    return torch.softmax(logits, dim=-1)


def alternatives(tokenizer: Tokenizer, probs: Tensor, skip: int, suggestion: str,
                 k: int = ALTERNATIVES) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """(the k likeliest first tokens, the likeliest one consistent with `suggestion` or None)."""
    target = b" " * skip + suggestion.encode("utf-8", errors="replace")
    order = torch.argsort(probs, descending=True).tolist()

    def entry(i: int, rank: int) -> dict[str, Any]:
        raw = tokenizer.token_bytes(i)
        return {"id": i, "token": probes.token_labels(tokenizer, [i])[0], "rank": rank,
                "text": raw[skip:].decode("utf-8", errors="replace"), "p": float(probs[i])}

    chosen = None
    for rank, i in enumerate(order, start=1):
        if not target or float(probs[i]) == 0.0:  # the rest are masked out by healing, or nothing to match
            break
        raw = tokenizer.token_bytes(i)
        if raw and (target.startswith(raw) or raw.startswith(target)):
            chosen = entry(i, rank)
            break
    top = [entry(i, rank) for rank, i in enumerate(order[:k], start=1)]
    for t in top:
        t["suggested"] = chosen is not None and t["id"] == chosen["id"]
    return top, chosen


def top_positions(texts: list[str], labels: list[str], weights: np.ndarray, first: int,
                  top: int = TOP_POSITIONS) -> list[dict[str, Any]]:
    """The `top` positions by overall weight (mean over the rows of weights (layers, n)), heaviest first;
    weights' columns are the tokens from index `first` of texts on."""
    overall = weights.mean(axis=0)
    order = sorted(range(len(overall)), key=lambda j: (-overall[j], -j))[:top]  # ties: the later token
    out = []
    for j in order:
        i = first + j
        out.append({"index": i, "token": labels[i], "text": texts[i],
                    "before": "".join(texts[:i])[-SNIPPET_CHARS:], "after": "".join(texts[i + 1:])[:SNIPPET_CHARS],
                    "weight": float(overall[j]), "layers": [float(w) for w in weights[:, j]]})
    return out


def context_pieces(texts: list[str], positions: list[dict[str, Any]], chars: int = CONTEXT_CHARS,
                   cut_before: bool = False) -> dict[str, Any]:
    """The end of the seen prompt (at least `chars` characters, whole tokens) as pieces of text; the top
    positions are pieces of their own with their rank and weight, the text between them is merged.
    cut: text comes before the pieces (earlier tokens, or, with `cut_before`, text before the window)."""
    first = len(texts)
    shown = 0
    while first > 0 and shown < chars:
        first -= 1
        shown += len(texts[first])
    ranked = {p["index"]: (rank, p["weight"]) for rank, p in enumerate(positions, start=1)}
    pieces: list[dict[str, Any]] = []
    for i in range(first, len(texts)):
        if i in ranked:
            rank, weight = ranked[i]
            pieces.append({"text": texts[i], "rank": rank, "weight": weight})
        elif pieces and "rank" not in pieces[-1]:
            pieces[-1]["text"] += texts[i]
        else:
            pieces.append({"text": texts[i]})
    return {"cut": first > 0 or cut_before, "pieces": pieces}


ABOUT = {
    "attention": "Attention of the last prompt token (where the first suggested token was chosen) over the "
                 "tokens the model saw, averaged over {heads} in each of {layers}; the weight is the mean "
                 "over layers, and each layer's weights sum to 1.",
    "gru": "How much of its state the GRU rewrote at each of the last {recent} tokens: 1 - z (the update "
           "gate), averaged over channels and {layers}. High: the token replaced what the state held; "
           "low: the state was kept.",
    "other": "A {mixer} model has no attention or recorded gates to show where it looked; only the next-token "
             "alternatives are given.",
}


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def explain(model: nn.Module, tokenizer: Tokenizer, subject: str, prefix: str, suggestion: str, *,
            top: int = TOP_POSITIONS, recent: int = RECENT) -> dict[str, Any]:
    """What the model looked at before the first token of `suggestion` after `prefix` (the body so far)."""
    cfg = model.cfg
    seen = seen_prompt(model, tokenizer, subject, prefix)
    texts, labels = probes.token_texts(tokenizer, seen.ids), probes.token_labels(tokenizer, seen.ids)
    if cfg.mixer == "attention":
        weights, first = attention_weights(model, tokenizer, seen.ids), 0
        with torch.no_grad():
            logits = model(torch.tensor([seen.ids], device=model_device(model)))[0][0, -1].float()  # (V,)
        about = ABOUT["attention"].format(heads=_count(cfg.n_head, "head"), layers=_count(weights.shape[0], "layer"))
    else:
        first, state, logits = _split_feed(model, seen.ids, recent)
        if cfg.mixer == "gru":
            weights = gate_rewrites(model, tokenizer, seen.ids, first, state)
            about = ABOUT["gru"].format(recent=len(seen.ids) - first, layers=_count(weights.shape[0], "layer"))
        else:
            weights, about = np.zeros((0, 0)), ABOUT["other"].format(mixer=cfg.mixer)
    positions = top_positions(texts, labels, weights, first, top) if weights.size else []
    alts, chosen = alternatives(tokenizer, next_token_probs(logits, seen.allowed), seen.skip, suggestion)
    return {
        "source": "model", "family": cfg.mixer, "measure": {"attention": "attention", "gru": "rewrite"}.get(cfg.mixer),
        "about": about, "suggestion": suggestion, "first_token": chosen, "alternatives": alts,
        "healed": seen.healed,
        "window": {"start": seen.start, "tokens": len(seen.ids), "chars_before": seen.chars_before,
                   "measured_from": first},
        "layers": int(weights.shape[0]), "positions": positions,
        "context": context_pieces(texts, positions, cut_before=seen.chars_before > 0),
    }


SOURCES = {
    "memory": "You wrote this before: it is what followed the same words in your own earlier mail.",
    "reply": "This is copied from the message you are answering, where your reply started to use it.",
}


def told_by_source(engine: CompletionEngine, suggestion_id: str | None, subject: str, prefix: str, text: str, *,
                   show_origin: bool) -> dict[str, Any] | None:
    """The why panel's answer for a suggestion from the memory or the original; None for the model's (or an
    unknown one, which the model then explains). `show_origin`: name the earlier email (the compose page)."""
    known = engine.explained.get(suggestion_id) if suggestion_id else None
    if known is None:
        again = engine.memory.propose(prompt_text(subject, prefix))
        if again is None or not _shown_part(again.text, text):
            return None
        known = (again.source, again.origin)
    source, origin = known
    if source not in SOURCES:
        return None
    out: dict[str, Any] = {"source": source, "about": SOURCES[source], "suggestion": text}
    if source == "memory" and show_origin and origin:
        out["origin"] = origin
    return out


def _shown_part(proposed: str, shown: str) -> bool:
    """Whether `shown` is `proposed` or its first words (a suggestion the gate cut)."""
    return proposed == shown or (proposed.startswith(shown) and proposed[len(shown)].isspace())
