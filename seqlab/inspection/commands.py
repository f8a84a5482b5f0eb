"""The files of `seqlab attention` and `seqlab inspect`, written from views already computed.

`save_attention` draws every chosen head's attention over a text plus the soft-lookup view of one query
(lecture slide "One weighted combination uses values, not token IDs"); `save_inspection` draws the position
encodings and, for a GRU, its gates over an email. The views come from `seqlab.api` (`Run.attention`,
`Run.inspect`), which the CLI calls.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from seqlab.inspection.figures import png_bytes
from seqlab.inspection.html import Section, page
from seqlab.inspection.plots import (
    attention_figure,
    attention_tables,
    output_kind,
    plot_attention,
    plot_gates,
    plot_position_similarity,
    plot_sinusoidal,
    plot_soft_lookup,
    soft_lookup_figure,
    soft_lookup_tables,
)
from seqlab.inspection.probes import AttentionMaps, SoftLookup


def lookup_path(out: Path | str) -> Path:
    """Where the PNG soft-lookup view goes next to the heatmaps at `out`: NAME-lookup.png."""
    out = Path(out)
    return out.with_name(out.stem + "-lookup.png")


def save_attention(maps: AttentionMaps, lookup: SoftLookup, out: Path | str, title: str) -> list[Path]:
    """Write attention heatmaps and the soft lookup of one query (as `seqlab attention` does); the files written.

    `.png`: the heatmap grid goes to `out` and the soft lookup to `lookup_path(out)`; `.html`: one page
    holding both, headed `title`.
    """
    out = Path(out)
    if output_kind(out) == "png":
        plot_attention(maps, out)
        return [out, plot_soft_lookup(lookup, lookup_path(out))]
    sections = [
        Section("Attention weights", png_bytes(attention_figure(maps)), attention_tables(maps),
                "Each row is a query token, each column a key it may attend to; grey cells are future keys "
                "that the causal mask removes. Each row sums to 1."),
        Section(f"Soft lookup of token {lookup.query_pos} ({lookup.query_label!r})",
                png_bytes(soft_lookup_figure(lookup)), soft_lookup_tables(lookup),
                "The query scores every earlier key, the softmax turns the scores into weights, and the "
                "output is the weighted sum of the values."),
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page(title, sections, maps.note), encoding="utf-8")
    return [out]


def save_inspection(out_dir: Path | str, block_size: int, n_embd: int, similarity: np.ndarray | None,
                    gates: list[tuple[list[str], np.ndarray, np.ndarray]]) -> list[Path]:
    """Write the position and gate views as PNGs in `out_dir` (as `seqlab inspect` does); the files written.

    Always sinusoidal.png (the encoding at block_size x n_embd); position-similarity.png when `similarity`
    (learned positions) is given; gates-layer{L}.png for each GRU layer's (labels, r, z).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [plot_sinusoidal(out_dir / "sinusoidal.png", block_size, n_embd)]
    if similarity is not None:
        written.append(plot_position_similarity(similarity, out_dir / "position-similarity.png"))
    for layer, (labels, r, z) in enumerate(gates):
        written.append(plot_gates(labels, r, z, out_dir / f"gates-layer{layer}.png"))
    return written
