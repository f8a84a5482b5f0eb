"""What a reply read of the message it answers: the cross-attention weights over the original.

`cross_attention_maps` runs a model trained with `model.context=cross` once over [bos] + the reply's
text with the original as its context (`seqlab.generation.reply.reply_context`), recording every
block's cross-attention (lecture slide "Cross-attention gets queries and context from different
sequences": the weight matrix is L_q x L_c, one normalized row per reply token). `cross_command` draws
one heatmap per chosen (layer, head), reply tokens as rows and original tokens as columns, and, in HTML,
the same numbers as tables plus, per head, the original tokens each reply token read most. A model with a
copy head (`model.context=...+copy` or `pointer`, models/copy.py) shows its pointer's weights as one more
row, "pointer": the distribution over the original's tokens that a copied token is drawn from.
`seqlab attention RUN "text" --reply-to FILE` calls it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from seqlab.data.tokenizer import Tokenizer
from seqlab.errors import UserError
from seqlab.generation.reply import read_reply_to, reads_context, reply_context
from seqlab.inspection.figures import colormap, png_bytes, subplots
from seqlab.inspection.html import Section, heat_table, page, plain_table
from seqlab.inspection.plots import MAX_TICKS, output_kind, token_axis
from seqlab.inspection.probes import choose_indices, encode_text, token_labels
from seqlab.models import record_attention
from seqlab.runs.load import load_run

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TOP = 3  # original tokens listed per reply token in the "read most" table


@dataclass
class CrossMaps:
    """Cross-attention weights of chosen heads: weights[(layer, head)] (Lq, Lc), rows = reply tokens,
    columns = original tokens; each row sums to 1 (0 for an empty original)."""

    labels: list[str]
    context_labels: list[str]
    weights: dict[tuple[int, int], np.ndarray]
    layers: list[int]
    heads: list[int]
    cropped: int = 0
    pointer: int | None = None  # the layer key of the copy head's weights (in the first head's column), if any


def _title(maps: CrossMaps, layer: int, head: int) -> str:
    return "pointer (copy head)" if layer == maps.pointer else f"layer {layer}, head {head}"


def cross_attention_maps(model: nn.Module, tokenizer: Tokenizer, text: str, original: str,
                         layers: Sequence[int] | int | None = None,
                         heads: Sequence[int] | int | None = None) -> CrossMaps:
    """Run the model on [bos] + text reading `original`; the chosen heads' cross-attention weights."""
    if not reads_context(model):
        raise UserError("this run's model has no cross-attention (trained with model.context=none); "
                        "--reply-to needs one that reads the message being answered")
    copy = model.cfg.copies
    if not model.cfg.cross_attends and not copy:
        raise UserError("this run's model reads the message being answered through its initial states "
                        "(model.context=init_state), not cross-attention: there are no weights to show")
    if not original.strip():
        raise UserError("the message being replied to is empty after cleaning; there is nothing to attend to")
    ids, cropped = encode_text(model, tokenizer, text)
    ctx = reply_context(model, tokenizer, original)
    assert ctx is not None
    layer_ids = choose_indices(layers, model.cfg.n_layer, "layer") if model.cfg.cross_attends else []
    head_ids = choose_indices(heads, model.cfg.n_head, "head")
    was = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        with torch.no_grad(), record_attention() as rec:
            model(torch.tensor([ids], device=device), context=ctx.to(device))
    finally:
        model.train(was)
    weights = {(layer, head): rec.get(layer, "cross")[0, head].float().cpu().numpy()
               for layer in layer_ids for head in head_ids}
    pointer = model.cfg.n_layer if copy else None
    if pointer is not None:  # the copy head records after the last block: (B, 1, Lq, Lc)
        weights[(pointer, head_ids[0])] = rec.get(pointer, "pointer")[0, 0].float().cpu().numpy()
        layer_ids = [*layer_ids, pointer]
    context_ids = ctx.ids[0, 0][ctx.keep[0, 0]].tolist()
    return CrossMaps(token_labels(tokenizer, ids), token_labels(tokenizer, context_ids), weights, layer_ids,
                     head_ids, cropped, pointer)


def cross_figure(maps: CrossMaps) -> Figure:
    """One heatmap per (layer, head): rows = reply tokens (queries), columns = original tokens (keys)."""
    n_rows, n_cols = len(maps.layers), len(maps.heads)
    lq, lc = len(maps.labels), len(maps.context_labels)
    width = min(14.0, max(3.5, 0.12 * lc + 1.5))
    height = min(12.0, max(3.0, 0.14 * lq + 1.5))
    fig, axes = subplots(n_rows, n_cols, figsize=(width * n_cols + 1.0, height * n_rows), squeeze=False,
                         layout="constrained")
    image = None
    # rows spread over many original tokens: the colour scale ends at the largest weight shown, not at 1
    top = max(float(w.max()) for w in maps.weights.values()) or 1.0
    for r, layer in enumerate(maps.layers):
        for c, head in enumerate(maps.heads):
            ax = axes[r][c]
            if (layer, head) not in maps.weights:  # the pointer's row has one head
                ax.set_visible(False)
                continue
            image = ax.imshow(maps.weights[(layer, head)], cmap=colormap("viridis"), vmin=0.0, vmax=top,
                              interpolation="nearest", aspect="auto")
            ax.set_title(_title(maps, layer, head), fontsize=9)
            token_axis(ax, maps.context_labels, "x", max(MAX_TICKS, int(width / 0.13)))
            token_axis(ax, maps.labels, "y", max(MAX_TICKS, int(height / 0.13)))
            ax.set_xlabel("original (the message replied to)", fontsize=8)
            ax.set_ylabel("reply token (querying)", fontsize=8)
    fig.colorbar(image, ax=axes, shrink=0.6, label="cross-attention weight")
    fig.suptitle(f"Cross-attention: {lq} reply tokens reading {lc} tokens of the original", fontsize=10)
    return fig


def read_most(maps: CrossMaps, layer: int, head: int, top: int = TOP) -> list[dict[str, object]]:
    """Per reply token, the `top` original tokens it read most in one head, with their weights."""
    w = maps.weights[(layer, head)]
    rows = []
    for i, label in enumerate(maps.labels):
        best = np.argsort(-w[i], kind="stable")[:top]
        rows.append({"pos": i, "reply token": label,
                     "read most": "  ".join(f"{maps.context_labels[j]} ({w[i, j]:.2f})" for j in best if w[i, j] > 0)})
    return rows


def cross_tables(maps: CrossMaps) -> list[str]:
    labels = [f"{i}:{t}" for i, t in enumerate(maps.labels)]
    ctx = [f"{j}:{t}" for j, t in enumerate(maps.context_labels)]
    tables = []
    for layer, head in maps.weights:
        title = _title(maps, layer, head)
        tables.append(plain_table(read_most(maps, layer, head), f"{title}: what each reply token read most"))
        tables.append(heat_table(maps.weights[(layer, head)], labels, ctx,
                                 f"{title}: row = reply token, column = original token", lo=0.0, hi=1.0))
    return tables


def cross_command(run_dir: Path | str, text: str, reply_to: Path, out: Path | str, layer: int | None = None,
                  head: int | None = None) -> Path:
    """The cross-attention view of RUN_DIR's model: `text` (the reply) reading the message at `reply_to`."""
    out = Path(out)
    kind = output_kind(out)  # a bad suffix fails before the model is loaded
    original = read_reply_to(reply_to)
    model, tok, _ = load_run(run_dir, device="cpu")
    maps = cross_attention_maps(model, tok, text, original, layer, head)
    note = (f"The reply was cropped to its last {len(maps.labels)} tokens (block_size)." if maps.cropped else "")
    fig = cross_figure(maps)
    out.parent.mkdir(parents=True, exist_ok=True)
    if kind == "png":
        out.write_bytes(png_bytes(fig))
        return out
    section = Section("Cross-attention over the original", png_bytes(fig), cross_tables(maps),
                      "Each row is a token of the reply, each column a token of the message it answers; a row "
                      "holds that token's attention weights over the original and sums to 1.")
    out.write_text(page(f"What {Path(run_dir).name} read of the original", [section], note), encoding="utf-8")
    return out
