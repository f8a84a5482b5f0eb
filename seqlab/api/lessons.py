"""The lecture's lessons from Python: the experiments of `seqlab lesson NAME` (`lesson`), and the small pieces of
attention a notebook computes by hand, each the code the models themselves run.

- `softmax`: the lecture's row softmax with the row maximum subtracted (`seqlab.models.attention.stable_softmax`);
- `soft_lookup`: one query scored against keys, y = sum_j a_j v_j (slide "One weighted combination uses values,
  not token IDs": q = [1], keys [0], [log 2], [log 3] give weights 1/6, 2/6, 3/6 and y = [7/6, 5/3]);
- `attention_weights`: A = softmax_row(Q K^T / sqrt(d_k) + M), with the causal mask M when asked (slide "A causal
  mask removes future positions before softmax");
- `self_attention_layer`: one seeded multi-head self-attention layer with a chosen kind of position information
  (slide "Self-attention without positions is permutation equivariant");
- `state_numbers`: how many numbers a model's incremental state holds (slide "Fixed-width memory").

Arrays go in and come out as numpy (float64 where the lecture's arithmetic is shown exactly).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from seqlab.errors import UserError
from seqlab.private_files import private_umask

if TYPE_CHECKING:
    from seqlab.inspection.probes import LookupMath
    from seqlab.studies.lessons.common import LessonResult

ArrayLike = Sequence[Any] | np.ndarray


def lesson_names() -> list[str]:
    """The lessons `lesson` runs: permutation, scaling, gradient-path, parallel, memory."""
    from seqlab.studies.lessons import LESSONS

    return list(LESSONS)


@private_umask()
def lesson(name: str, out: str | Path | None = None, *, size: str | None = None, seed: int = 0,
           progress: bool = False) -> LessonResult:
    """Run one of the lecture's experiments (`seqlab lesson NAME`) and return its `LessonResult`: `rows` (the
    table), `measured` (the headline numbers), `paragraph` (what was measured and what it shows), `figure`
    (the plot, a matplotlib Figure) and `files` (NAME.png, .csv, .md, .json written into `out`, a new
    temporary folder when None). `size` "tiny" takes seconds; "small" (the default for most) is the real
    measurement. Unknown names and sizes are a `UserError`."""
    from seqlab.studies.lessons import run_lesson

    folder = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix=f"seqlab-{name}-"))
    try:
        return run_lesson(name, folder, size=size, seed=seed, progress=progress)
    except ValueError as exc:  # an unknown lesson or size, said in one sentence
        raise UserError(str(exc)) from None


def _tensor(x: ArrayLike, name: str, dims: int) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(x, dtype=np.float64))
    if t.dim() != dims:
        raise UserError(f"{name} must be a {dims}-dimensional array, not one of shape {tuple(t.shape)}.")
    return t


def softmax(scores: ArrayLike) -> np.ndarray:
    """a_j = exp(s_j - m) / sum_k exp(s_k - m) with m = max_k s_k, along the last axis (float64)."""
    from seqlab.models.attention import stable_softmax

    return stable_softmax(torch.as_tensor(np.asarray(scores, dtype=np.float64)), dim=-1).numpy()


def soft_lookup(query: ArrayLike, keys: ArrayLike, values: ArrayLike) -> LookupMath:
    """One query (d_k,) against keys (n, d_k) and values (n, d_v): `.scores` q.k_j / sqrt(d_k), `.weights` their
    softmax, `.contributions` a_j v_j (n, d_v) and `.output` y = sum_j a_j v_j (d_v,), in float64."""
    from seqlab.inspection.probes import lookup_math

    q, k, v = _tensor(query, "query", 1), _tensor(keys, "keys", 2), _tensor(values, "values", 2)
    if k.size(1) != q.size(0) or v.size(0) != k.size(0):
        raise UserError(f"query {tuple(q.shape)}, keys {tuple(k.shape)} and values {tuple(v.shape)} do not fit: "
                        "keys need the query's width and one row per value.")
    return lookup_math(q, k, v)


def attention_weights(queries: ArrayLike, keys: ArrayLike, *, causal: bool = False, scale: bool = True) -> np.ndarray:
    """A = softmax_row(Q K^T / sqrt(d_k) + M) for queries (Lq, d_k) and keys (Lk, d_k): (Lq, Lk), float64.

    `causal` adds the lecture's mask M (0 on and below the diagonal, -inf above; needs Lq == Lk), so row i
    weighs keys 0..i only. `scale=False` leaves out the 1/sqrt(d_k), to see the softmax saturate.
    """
    from seqlab.models.attention import causal_mask, stable_softmax

    q, k = _tensor(queries, "queries", 2), _tensor(keys, "keys", 2)
    if q.size(1) != k.size(1):
        raise UserError(f"queries {tuple(q.shape)} and keys {tuple(k.shape)} must have the same width d_k.")
    s = q @ k.T  # (Lq, Lk)
    if scale:
        s = s / q.size(1) ** 0.5
    if causal:
        if q.size(0) != k.size(0):
            raise UserError("the causal mask needs as many queries as keys.")
        s = s + causal_mask(q.size(0)).double()
    return stable_softmax(s, dim=-1).numpy()


def self_attention_layer(pos: str = "none", *, causal: bool = False, n_embd: int = 32, n_head: int = 4,
                         seed: int = 0) -> Callable[[ArrayLike], np.ndarray]:
    """One multi-head self-attention layer with seeded weights: a function from rows X (L, n_embd) to SA(X)
    (L, n_embd). `pos` is the position information: "none" (the lecture's case), "learned", "sinusoidal"
    (added to the rows), "rope" or "alibi" (inside attention); `causal` applies the causal mask. The same
    `seed` gives the same attention weights whatever `pos`, so layers differ only in their positions."""
    from seqlab.studies.lessons.permutation import self_attention_layer as build

    if n_embd < 1 or n_head < 1 or n_embd % n_head:
        raise UserError(f"n_embd must be a positive multiple of n_head, not {n_embd} and {n_head}.")
    try:
        layer = build(pos, causal, n_embd, n_head, seed)
    except ValueError as exc:  # an unknown position kind, said in one sentence
        raise UserError(str(exc)) from None

    def apply(rows: ArrayLike) -> np.ndarray:
        x = torch.as_tensor(np.asarray(rows, dtype=np.float32))
        if x.dim() != 2 or x.size(1) != n_embd:
            raise UserError(f"rows must be an (L, {n_embd}) array, not one of shape {tuple(x.shape)}.")
        return layer(x).numpy()

    return apply


def state_numbers(state: Any) -> int:
    """How many numbers a model's state (the second thing `model(idx, state)` returns) keeps for the tokens it
    has read: an attention layer's key/value cache grows with every token, a recurrent layer's hidden state
    does not (slide "Fixed-width memory"). Position counters are not counted."""
    from seqlab.models.kv_cache import KVCache

    layers = getattr(state, "layers", None)
    if layers is None:
        raise UserError("state_numbers expects the state a seqlab model returns, model(idx)[1].")
    total = 0
    for layer in layers:
        if isinstance(layer, KVCache):  # a preallocated buffer: count what the tokens so far filled
            b, h, _, d = layer.k.shape
            total += 2 * b * h * layer.length * d
        else:
            total += _numel(layer)
    return total


def _numel(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel()
    if isinstance(obj, (list, tuple)):
        return sum(_numel(o) for o in obj)
    if isinstance(obj, dict):
        return sum(_numel(o) for o in obj.values())
    return 0
