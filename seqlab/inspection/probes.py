"""What a trained model computes on one email, as arrays for plots and tables (no plotting here).

- `token_labels`: readable labels for token ids (spaces and newlines made visible, BPE merges shown whole).
- `attention_maps`: every chosen head's weight matrix A = softmax_row(Q K^T / sqrt(d_k) + M) over the
  email, recorded by `record_attention()` (lecture: "One row of A gives the input-dependent weights for
  one output row of Y"); `attention_maps_of_ids` the same over token ids exactly as given.
- `lookup_math` / `soft_lookup`: one query row taken apart, the lecture's "please / send / the" table
  (slide "One weighted combination uses values, not token IDs"): scores, softmax weights and what each
  value contributed to the head's output.
- `gru_gates` / `gru_gates_of_ids`: the GRU's reset and update gates over the email; `sinusoidal_table`,
  `learned_position_similarity`: the two kinds of position vectors as matrices.
"""

from __future__ import annotations

import codecs
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from seqlab.data.tokenizer import Tokenizer
from seqlab.errors import UserError
from seqlab.models.attention import MultiHeadAttention, stable_softmax
from seqlab.models.positional import LearnedPositions, sinusoid_table
from seqlab.models.recorder import record_attention

# whitespace and control characters drawn as visible glyphs so a label never looks empty
_VISIBLE = {" ": "␣", "\n": "⏎", "\t": "⇥", "\r": "\\r"}


def _visible(s: str) -> str:
    return "".join(_VISIBLE.get(c, c if c.isprintable() else f"\\x{ord(c):02x}") for c in s)


def _decoded(tokenizer: Tokenizer, ids: Sequence[int]) -> Iterator[tuple[str, bytes, bool]]:
    """(text the token completes, bytes still pending, is special) per id, through one incremental UTF-8
    decoder, so a character split over several byte tokens is completed by its last token."""
    names = {i: n.replace("|", "") for n, i in tokenizer.specials().items()}
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for i in ids:
        if int(i) in names:
            decoder.reset()
            yield names[int(i)], b"", True
        else:
            yield decoder.decode(tokenizer.token_bytes(int(i))), decoder.getstate()[0], False


def token_texts(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    """The text each token completes ('' for a byte that only starts a character); specials by name."""
    return [text for text, _, _ in _decoded(tokenizer, ids)]


def token_labels(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    """One readable label per id: the text the token completes, whitespace shown as ␣ ⏎ ⇥.

    A character split over several byte tokens is shown on the token that completes it; the tokens
    before it show their pending bytes in hex (e.g. <c3>). Special tokens are shown by name (<bos>).
    """
    return [text if special else _visible(text) if text else "<" + pending.hex() + ">"
            for text, pending, special in _decoded(tokenizer, ids)]


@dataclass
class AttentionMaps:
    """Attention weights of chosen heads over one text.

    weights[(layer, head)]: (L, L) numpy array, row i = query position i, column j = key position j;
    zero above the diagonal (causal). labels: L token labels; ids: the L token ids that were run.
    cropped: how many leading tokens were dropped to fit block_size (0 when none).
    """

    labels: list[str]
    ids: list[int]
    weights: dict[tuple[int, int], np.ndarray]
    layers: list[int]
    heads: list[int]
    cropped: int = 0
    pos: str = "none"

    @property
    def note(self) -> str:
        """A sentence for the reader when the text was cropped, else ''."""
        if not self.cropped:
            return ""
        return f"The text was cropped to its last {len(self.ids)} tokens (block_size); {self.cropped} were dropped."


def encode_text(model: nn.Module, tokenizer: Tokenizer, text: str, limit: int | None = None) -> tuple[list[int], int]:
    """[bos] + encode(text), cropped to its last `limit` tokens (default model.cfg.block_size).

    Returns (ids, number of tokens dropped). Empty text is a UserError.
    """
    if not text or not text.strip():
        raise UserError("the text to inspect is empty; give a few words of an email.")
    ids = [tokenizer.bos_id, *tokenizer.encode(text)]
    limit = limit or model.cfg.block_size
    cropped = max(0, len(ids) - limit)
    return ids[cropped:], cropped


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """Run without dropout, then give the model back in the mode it came in."""
    was = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was)


def _run(model: nn.Module, ids: list[int], state: object = None) -> None:
    device = next(model.parameters()).device
    with torch.no_grad():
        model(torch.tensor([ids], dtype=torch.long, device=device), state=state)  # (1, L)


def _attention_modules(model: nn.Module) -> list[MultiHeadAttention]:
    mods = [b.mixer for b in getattr(model, "blocks", []) if isinstance(b.mixer, MultiHeadAttention)]
    if not mods:
        mixer = getattr(getattr(model, "cfg", None), "mixer", type(model).__name__)
        raise UserError(f"this run's model is a {mixer} model without self-attention; attention maps need "
                        "a run trained with model.mixer=attention.")
    return mods


def choose_indices(asked: Sequence[int] | int | None, count: int, what: str) -> list[int]:
    if asked is None:
        return list(range(count))
    chosen = [asked] if isinstance(asked, int) else list(asked)
    for c in chosen:
        if not 0 <= c < count:
            raise UserError(f"{what} {c} does not exist; this model has {what}s 0 to {count - 1}.")
    return chosen


def attention_maps(model: nn.Module, tokenizer: Tokenizer, text: str, layers: Sequence[int] | int | None = None,
                   heads: Sequence[int] | int | None = None) -> AttentionMaps:
    """Run the model once on [bos] + encode(text) and return the chosen heads' (L, L) weight matrices."""
    _attention_modules(model)  # a model without attention is told so before anything else
    ids, cropped = encode_text(model, tokenizer, text)
    return attention_maps_of_ids(model, tokenizer, ids, layers, heads, cropped)


def attention_maps_of_ids(model: nn.Module, tokenizer: Tokenizer, ids: Sequence[int],
                          layers: Sequence[int] | int | None = None, heads: Sequence[int] | int | None = None,
                          cropped: int = 0) -> AttentionMaps:
    """`attention_maps` over token ids exactly as given (no <bos> added, no crop): e.g. the window of a
    prompt that the autocomplete server's model saw (`seqlab.serving.why`)."""
    mods = _attention_modules(model)
    layer_ids = choose_indices(layers, len(mods), "layer")
    head_ids = choose_indices(heads, model.cfg.n_head, "head")
    ids = [int(i) for i in ids]
    with _eval_mode(model), record_attention() as rec:
        _run(model, ids)
    weights = {}
    for layer in layer_ids:
        a = rec.get(mods[layer].layer)  # (B=1, H, L, L)
        for head in head_ids:
            weights[(layer, head)] = a[0, head].float().cpu().numpy()
    return AttentionMaps(token_labels(tokenizer, ids), ids, weights, layer_ids, head_ids, cropped,
                         getattr(model.cfg, "pos", "none"))


@dataclass
class LookupMath:
    """One query row of attention taken apart (lecture slide "One weighted combination uses values").

    For keys j = 0..n-1: scores (n,) = q.k_j / sqrt(d_k) + bias_j; weights (n,) = softmax(scores);
    contributions (n, Dv) = weights_j * v_j; output (Dv,) = their sum; norms (n,) = |weights_j v_j|;
    shares (n,) = norms / sum(norms), the fraction of the total contribution length each key supplied.
    """

    scores: np.ndarray
    weights: np.ndarray
    contributions: np.ndarray
    output: np.ndarray
    norms: np.ndarray
    shares: np.ndarray
    bias: np.ndarray | None = None


def lookup_math(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None) -> LookupMath:
    """Soft lookup for one query: q (D,), keys k (n, D), values v (n, Dv), additive score bias (n,) or None.

    y = sum_j softmax_j(q.k_j / sqrt(d_k) + bias_j) v_j (lecture: S = Q K^T / sqrt(d_k), A = softmax_row(S),
    Y = A V, read for one row). Computed in float64 so the table shows the exact arithmetic.
    """
    q, k, v = (t.detach().to(torch.float64).cpu() for t in (q, k, v))
    scores = k @ q / math.sqrt(q.size(-1))  # (n,)
    b = None if bias is None else bias.detach().to(torch.float64).cpu()
    logits = scores if b is None else scores + b
    weights = stable_softmax(logits, dim=-1)  # (n,)
    contributions = weights[:, None] * v  # (n, Dv)
    norms = contributions.norm(dim=-1)  # (n,)
    total = norms.sum()
    shares = norms / total if total > 0 else torch.zeros_like(norms)
    return LookupMath(scores.numpy(), weights.numpy(), contributions.numpy(), contributions.sum(0).numpy(),
                      norms.numpy(), shares.numpy(), None if b is None else b.numpy())


@dataclass
class SoftLookup:
    """`lookup_math` for one query position of one head of a model, with the tokens and the checks.

    math: the row taken apart over keys 0..query_pos (earlier keys are masked by causality);
    labels: the key tokens' labels; head_output (Dv,): what the module itself produced for that head and
    position (read at the input of its output projection W_O); recorded_weights: the weight row that
    `record_attention()` captured. Both must agree with `math` (tests check it).
    """

    labels: list[str]
    query_pos: int
    layer: int
    head: int
    math: LookupMath
    head_output: np.ndarray
    recorded_weights: np.ndarray
    cropped: int = 0
    pos: str = "none"
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def query_label(self) -> str:
        return self.labels[self.query_pos]


def _capture(module: MultiHeadAttention) -> tuple[dict[str, Tensor], list[torch.utils.hooks.RemovableHandle]]:
    """Forward pre-hooks keeping the module's input x (B, T, C) and its heads' output before W_O (B, T, C)."""
    seen: dict[str, Tensor] = {}

    def keep_input(_m: nn.Module, args: tuple) -> None:
        seen.setdefault("x", args[0].detach())

    def keep_heads(_m: nn.Module, args: tuple) -> None:
        seen.setdefault("y", args[0].detach())

    return seen, [module.register_forward_pre_hook(keep_input), module.out_proj.register_forward_pre_hook(keep_heads)]


def _project(module: MultiHeadAttention, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """Recompute the module's queries, keys, values (B, H, T, D) and score bias (H, T, T) from its input."""
    b, t, c = x.shape
    h, d = module.n_head, module.head_dim
    q = module.q_proj(x).view(b, t, h, d).transpose(1, 2)  # (B, T, C) -> (B, H, T, D)
    k, v = (z.reshape(b, t, h, d).transpose(1, 2) for z in module.kv_proj(x).split(c, dim=-1))  # (B, H, T, D)
    bias = None
    if module.pos is not None:
        q, k = module.pos.rotate(q, k, 0)  # RoPE rotates q and k; identity for other kinds
        bias = module.pos.score_bias(t, t, 0, x.device, q.dtype)  # ALiBi: (H, T, T); None otherwise
    return q, k, v, bias


def soft_lookup(model: nn.Module, tokenizer: Tokenizer, text: str, query_pos: int = -1, layer: int = 0,
                head: int = 0) -> SoftLookup:
    """Take apart the attention row of token `query_pos` (negative counts from the end) in one head."""
    mods = _attention_modules(model)
    (layer,) = choose_indices(layer, len(mods), "layer")
    (head,) = choose_indices(head, model.cfg.n_head, "head")
    ids, cropped = encode_text(model, tokenizer, text)
    n = len(ids)
    if not -n <= query_pos < n:
        raise UserError(f"query position {query_pos} is outside the text's {n} tokens (0 to {n - 1}).")
    i = query_pos % n
    module = mods[layer]
    seen, handles = _capture(module)
    try:
        with _eval_mode(model), record_attention() as rec:
            _run(model, ids)
        with torch.no_grad():
            q, k, v, bias = _project(module, seen["x"])
    finally:
        for hnd in handles:
            hnd.remove()
    d = module.head_dim
    # causal: query i scores keys 0..i only (lecture: "A causal mask removes future positions")
    row_bias = None if bias is None else bias[head, i, : i + 1]
    math_ = lookup_math(q[0, head, i], k[0, head, : i + 1], v[0, head, : i + 1], row_bias)
    head_out = seen["y"][0, i, head * d : (head + 1) * d].double().cpu().numpy()  # this head's slice of (C,)
    recorded = rec.get(module.layer)[0, head, i, : i + 1].double().cpu().numpy()
    return SoftLookup(token_labels(tokenizer, ids)[: i + 1], i, layer, head, math_, head_out, recorded, cropped,
                      getattr(model.cfg, "pos", "none"))


GATE_TOKENS = 256  # most tokens a gate view shows when positions do not limit the length


def gate_limit(model: nn.Module) -> int:
    """How many tokens `gru_gates` keeps: block_size with learned positions (no vectors beyond it), else
    GATE_TOKENS (a recurrent model runs any length; the limit keeps the plot readable)."""
    return model.cfg.block_size if getattr(model.cfg, "pos", "none") == "learned" else GATE_TOKENS


def gru_gates(model: nn.Module, tokenizer: Tokenizer, text: str, layer: int = 0,
              limit: int | None = None) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Reset gate r and update gate z of a GRU layer over [bos] + encode(text): labels, r (L, C), z (L, C).

    Runs the gate-by-gate loop (`RecurrentMixer.record_gates`). limit: most tokens kept, the last ones
    (default `gate_limit(model)`).
    """
    gru_layers(model)  # a model without a GRU is told so before anything else
    ids, _ = encode_text(model, tokenizer, text, limit or gate_limit(model))
    return gru_gates_of_ids(model, tokenizer, ids, layer)


def gru_layers(model: nn.Module) -> list[nn.Module]:
    """The model's GRU mixers in block order; a UserError when it has none."""
    from seqlab.models.rnn import RecurrentMixer  # imported on use, like the LM does

    grus = [b.mixer for b in getattr(model, "blocks", [])
            if isinstance(b.mixer, RecurrentMixer) and b.mixer.kind == "gru"]
    if not grus:
        raise UserError("this run's model has no GRU layer; gate activations need model.mixer=gru.")
    return grus


def gru_gates_of_ids(model: nn.Module, tokenizer: Tokenizer, ids: Sequence[int], layer: int = 0,
                     state: object = None) -> tuple[list[str], np.ndarray, np.ndarray]:
    """`gru_gates` over token ids exactly as given, continuing from the model `state` returned after the
    tokens before them (None: from the start); e.g. the last tokens of a long prompt, whose earlier part
    ran through the fast fused path (`seqlab.serving.why`)."""
    grus = gru_layers(model)
    (layer,) = choose_indices(layer, len(grus), "GRU layer")
    mixer = grus[layer]
    ids = [int(i) for i in ids]
    before = mixer.record_gates
    mixer.record_gates = True
    try:
        with _eval_mode(model):
            _run(model, ids, state)
        gates = mixer.last_gates
    finally:
        mixer.record_gates = before
    assert gates is not None  # record_gates on a GRU always fills them
    r, z = (gates[g][0].float().cpu().numpy() for g in ("r", "z"))  # (B=1, L, C) -> (L, C)
    return token_labels(tokenizer, ids), r, z


def sinusoidal_table(length: int, n_embd: int) -> np.ndarray:
    """The (length, n_embd) sinusoidal encoding of Vaswani et al. 2017 (section 3.5), as the models use it."""
    if length < 1 or n_embd < 1:
        raise UserError(f"the sinusoidal table needs positive sizes, not {length} x {n_embd}.")
    return sinusoid_table(torch.arange(length), n_embd).numpy()


def learned_position_similarity(model: nn.Module) -> np.ndarray:
    """Cosine similarity (P, P) between the learned position vectors of a model with model.pos=learned."""
    pos = getattr(model, "pos", None)
    if not isinstance(pos, LearnedPositions):
        raise UserError("this run's model has no learned position embeddings (model.pos is not learned).")
    table = pos.table.weight.detach().double().cpu()  # (P, C)
    unit = table / table.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return (unit @ unit.T).numpy()  # (P, P)
