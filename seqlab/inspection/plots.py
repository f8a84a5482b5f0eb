"""Figures of what a model computes (`seqlab.inspection.figures`), written as PNG or self-contained HTML.

Each view has a `*_figure` function (returns a matplotlib Figure), a `*_tables` function (the same numbers
as HTML tables) and a `plot_*` function that writes `out_path`: `.png` through savefig, `.html` as one
page with the PNG embedded as a data URI plus the tables (`seqlab.inspection.html`); any other suffix is a
UserError. The numbers come from `seqlab.inspection.probes`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from seqlab.errors import UserError
from seqlab.inspection.figures import colormap, png_bytes, subplots
from seqlab.inspection.html import Section, heat_table, page, plain_table
from seqlab.inspection.probes import AttentionMaps, SoftLookup, sinusoidal_table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MAX_TICKS = 48  # at most this many token labels per axis; longer texts label every k-th token
LOOKUP_ROWS = 16  # the PNG table of a soft lookup lists this many keys (the heaviest); HTML lists all


def output_kind(out_path: Path | str) -> str:
    """'png' or 'html' from the file name; anything else is a UserError."""
    suffix = Path(out_path).suffix.lower()
    if suffix not in (".png", ".html"):
        raise UserError(f"{out_path}: the output must end in .png or .html, not {suffix or 'no suffix'!r}.")
    return suffix[1:]


def write_output(out_path: Path | str, title: str, fig: Figure, tables: Sequence[str] = (), note: str = "") -> Path:
    """Write a figure to `out_path`: a PNG, or an HTML page holding the PNG and the tables."""
    out = Path(out_path)
    kind = output_kind(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    png = png_bytes(fig)
    if kind == "png":
        out.write_bytes(png)
    else:
        out.write_text(page(title, [Section("", png, list(tables))], note), encoding="utf-8")
    return out


def token_axis(ax: Any, labels: Sequence[str], axis: str, max_ticks: int = MAX_TICKS) -> None:
    """Token labels on one axis of a heatmap: every k-th token (at most max_ticks), small font, rotated on x."""
    step = max(1, math.ceil(len(labels) / max_ticks))
    ticks = list(range(0, len(labels), step))
    names = [labels[i] for i in ticks]
    size = 7 if len(ticks) <= 32 else 6
    if axis == "x":
        ax.set_xticks(ticks, names, rotation=90, fontsize=size)
    else:
        ax.set_yticks(ticks, names, fontsize=size)


def causal_masked(w: np.ndarray) -> np.ma.MaskedArray:
    """The (L, L) weights with the entries above the diagonal masked (they are future keys)."""
    future = np.triu(np.ones_like(w, dtype=bool), k=1)
    return np.ma.masked_array(w, mask=future)


def attention_figure(maps: AttentionMaps) -> Figure:
    """A grid of heatmaps, one per chosen (layer, head): rows = queries, columns = keys, future keys grey."""
    n_rows, n_cols = len(maps.layers), len(maps.heads)
    # inches per panel: room for the tick labels; one panel alone may grow larger than a grid's
    size = min(14.0 if n_rows * n_cols == 1 else 9.0, max(3.2, 0.14 * len(maps.labels) + 1.5))
    ticks = max(MAX_TICKS, int(size / 0.13))  # about 0.13 inch per label at font size 6
    fig, axes = subplots(n_rows, n_cols, figsize=(size * n_cols + 1.0, size * n_rows), squeeze=False,
                             layout="constrained")
    cmap = colormap("viridis").with_extremes(bad="#d9d9d9")  # masked future keys: a grey triangle
    image = None
    for r, layer in enumerate(maps.layers):
        for c, head in enumerate(maps.heads):
            ax = axes[r][c]
            image = ax.imshow(causal_masked(maps.weights[(layer, head)]), cmap=cmap, vmin=0.0, vmax=1.0,
                              interpolation="nearest")
            ax.set_title(f"layer {layer}, head {head}", fontsize=9)
            token_axis(ax, maps.labels, "x", ticks)
            token_axis(ax, maps.labels, "y", ticks)
            ax.set_xlabel("key (attended to)", fontsize=8)
            ax.set_ylabel("query (attending)", fontsize=8)
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    title = f"Attention weights, {len(maps.labels)} tokens (positions: {maps.pos})"
    fig.suptitle(title + ("\n" + maps.note if maps.note else ""), fontsize=10)
    return fig


def attention_tables(maps: AttentionMaps) -> list[str]:
    """One HTML table per head: queries as rows, keys as columns, each cell shaded by its weight."""
    labels = [f"{i}:{t}" for i, t in enumerate(maps.labels)]
    tables = []
    for (layer, head), w in maps.weights.items():
        future = np.triu(np.ones_like(w, dtype=bool), k=1)
        tables.append(heat_table(w, labels, labels, f"layer {layer}, head {head}: row = query, column = key",
                                 mask=future, lo=0.0, hi=1.0))
    return tables


def plot_attention(maps: AttentionMaps, out_path: Path | str) -> Path:
    """Write the heatmap grid (PNG) or a page with it and one weight table per head (HTML)."""
    output_kind(out_path)
    return write_output(out_path, "Attention weights", attention_figure(maps), attention_tables(maps), maps.note)


def lookup_rows(lookup: SoftLookup) -> list[dict[str, object]]:
    """The lecture's table for one query: one row per key (score, softmax weight, contribution size)."""
    m = lookup.math
    rows = []
    for j, label in enumerate(lookup.labels):
        row: dict[str, object] = {"pos": j, "token": label, "score": float(m.scores[j])}
        if m.bias is not None:
            row["bias"] = float(m.bias[j]) + 0.0  # + 0.0 turns -0.0 (distance 0) into 0.0
        row.update({"weight": float(m.weights[j]), "|a v|": float(m.norms[j]), "share": float(m.shares[j])})
        rows.append(row)
    return rows


def _lookup_title(lookup: SoftLookup) -> str:
    err = float(np.abs(lookup.math.output - lookup.head_output).max())
    return (f"Soft lookup: query {lookup.query_pos} '{lookup.query_label}', layer {lookup.layer}, head "
            f"{lookup.head}\ny = sum_j a_j v_j matches the head's output (max difference {err:.1e})")


def soft_lookup_figure(lookup: SoftLookup) -> Figure:
    """A bar chart of the softmax weight per key, and a table of the heaviest keys' numbers."""
    n = len(lookup.labels)
    fig, (ax, tab) = subplots(2, 1, figsize=(max(6.0, min(16.0, 0.16 * n + 3)), 8.0),
                                  height_ratios=(1.0, 1.2), layout="constrained")
    ax.bar(range(n), lookup.math.weights, color="#2166ac")
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_ylabel("softmax weight a_j")
    token_axis(ax, lookup.labels, "x")
    ax.set_title(_lookup_title(lookup), fontsize=9)
    rows = lookup_rows(lookup)
    keep = sorted(sorted(range(n), key=lambda j: -lookup.math.weights[j])[:LOOKUP_ROWS])
    cols = list(rows[0])
    cells = [[f"{rows[j][c]:.4g}" if isinstance(rows[j][c], float) else str(rows[j][c]) for c in cols] for j in keep]
    tab.axis("off")
    table = tab.table(cellText=cells, colLabels=cols, loc="upper center", cellLoc="right")
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    shown = "all keys" if len(keep) == n else f"the {len(keep)} heaviest of {n} keys"
    tab.set_title(f"score = q.k_j / sqrt(d_k){' + ALiBi bias' if lookup.math.bias is not None else ''}; "
                  f"|a v| = length of a_j v_j; share = its fraction of the total ({shown})", fontsize=8)
    return fig


def soft_lookup_tables(lookup: SoftLookup) -> list[str]:
    """The full per-key table and the output vector next to the module's own."""
    out = [{"dim": d, "sum_j a_j v_j": float(y), "head output": float(h)}
           for d, (y, h) in enumerate(zip(lookup.math.output, lookup.head_output))]
    return [plain_table(lookup_rows(lookup), "keys scored by the query"),
            plain_table(out, "the weighted sum of values and what the head produced")]


def plot_soft_lookup(lookup: SoftLookup, out_path: Path | str) -> Path:
    """Write the soft-lookup view of one query (PNG, or HTML with the full table)."""
    output_kind(out_path)
    return write_output(out_path, "Soft lookup", soft_lookup_figure(lookup), soft_lookup_tables(lookup))


def matrix_figure(m: np.ndarray, title: str, xlabel: str, ylabel: str, cbar: str, diverging: bool) -> Figure:
    """A heatmap of matrix m (rows down, columns across) with a colour bar; `diverging`: centred on 0."""
    h, w = m.shape
    fig, ax = subplots(figsize=(min(12.0, max(5.0, 0.06 * w + 3)), min(10.0, max(4.0, 0.05 * h + 2.5))),
                           layout="constrained")
    lim = float(np.abs(m).max()) or 1.0
    image = ax.imshow(m, cmap="RdBu_r" if diverging else "viridis", vmin=-lim if diverging else None,
                      vmax=lim if diverging else None, aspect="auto", interpolation="nearest")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    fig.colorbar(image, ax=ax, label=cbar)
    return fig


def plot_sinusoidal(out_path: Path | str, length: int, n_embd: int) -> Path:
    """Heatmap of the sinusoidal encoding PE[p, i] (Vaswani et al. 2017, section 3.5)."""
    output_kind(out_path)
    pe = sinusoidal_table(length, n_embd)  # (L, C)
    fig = matrix_figure(pe, f"Sinusoidal position encoding, {length} positions x {n_embd} dims",
                         "dimension i (pairs sin/cos, slower to the right)", "position p", "PE[p, i]", True)
    labels = [str(i) for i in range(max(length, n_embd))]
    table = heat_table(pe, labels[:length], labels[:n_embd], "PE[p, i]: rows = positions", diverging=True)
    return write_output(out_path, "Sinusoidal position encoding", fig, [table])


def plot_position_similarity(sim: np.ndarray, out_path: Path | str) -> Path:
    """Heatmap of the cosine similarity between learned position embeddings (P, P)."""
    output_kind(out_path)
    fig = matrix_figure(sim, "Cosine similarity of learned position embeddings", "position", "position",
                         "cos(P_i, P_j)", True)
    labels = [str(i) for i in range(sim.shape[0])]
    table = heat_table(sim, labels, labels, "cos(P_i, P_j)", diverging=True)
    return write_output(out_path, "Learned position similarity", fig, [table])


def gates_figure(labels: Sequence[str], r: np.ndarray, z: np.ndarray) -> Figure:
    """Reset and update gates over an email: units x time heatmaps and the mean over units per step."""
    length, units = r.shape
    fig, axes = subplots(3, 1, figsize=(max(7.0, min(18.0, 0.15 * length + 3)), 9.0), sharex=True,
                             height_ratios=(1.0, 1.0, 0.6), layout="constrained")
    for ax, g, name in ((axes[0], r, "reset gate r"), (axes[1], z, "update gate z (share of h_{t-1} kept)")):
        image = ax.imshow(g.T, cmap="magma", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
        ax.set(title=name, ylabel=f"unit (of {units})")
    fig.colorbar(image, ax=axes[:2], label="gate activation")
    t = np.arange(length)
    axes[2].plot(t, r.mean(axis=1), label="mean r", color="#b2182b")
    axes[2].plot(t, z.mean(axis=1), label="mean z", color="#2166ac")
    axes[2].set(ylim=(0.0, 1.0), ylabel="mean over units", xlabel="token")
    axes[2].legend(fontsize=8, loc="upper right")
    token_axis(axes[2], labels, "x")
    fig.suptitle("GRU gate activations over the email", fontsize=10)
    return fig


def plot_gates(labels: Sequence[str], r: np.ndarray, z: np.ndarray, out_path: Path | str) -> Path:
    """Write the GRU gate view (PNG, or HTML with per-step tables of both gates)."""
    output_kind(out_path)
    if r.shape != z.shape or r.shape[0] != len(labels):
        raise ValueError(f"gates {r.shape} / {z.shape} do not match {len(labels)} labels")
    units = [f"u{u}" for u in range(r.shape[1])]
    steps = [f"{i}:{t}" for i, t in enumerate(labels)]
    tables = [heat_table(g.T, units, steps, f"{name}: rows = units, columns = tokens", lo=0.0, hi=1.0)
              for g, name in ((r, "reset gate r"), (z, "update gate z"))]
    return write_output(out_path, "GRU gate activations", gates_figure(labels, r, z), tables)
