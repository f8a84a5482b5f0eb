"""The inspection commands the CLI calls: `seqlab attention` and `seqlab inspect`.

`attention_command` draws every chosen head's attention over a text plus the soft-lookup view of one
query (lecture slide "One weighted combination uses values, not token IDs"); `inspect_command` draws
the position encodings and, for a GRU, its gates over an email. Both read a RUN_DIR with `load_run`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from seqlab.runs.load import load_run
from seqlab.studies.figures import png_bytes
from seqlab.studies.html import Section, page
from seqlab.studies.inspection.plots import (
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
from seqlab.studies.inspection.probes import (
    attention_maps,
    gate_limit,
    gru_gates,
    learned_position_similarity,
    soft_lookup,
)


def lookup_path(out: Path | str) -> Path:
    """Where the PNG soft-lookup view goes next to the heatmaps at `out`: NAME-lookup.png."""
    out = Path(out)
    return out.with_name(out.stem + "-lookup.png")


def attention_command(run_dir: Path | str, text: str, out: Path | str, layer: int | None = None,
                      head: int | None = None, query: int | None = None) -> Path:
    """Attention heatmaps of RUN_DIR's model over `text`, and the soft lookup of token `query`.

    layer/head: only that layer/head (default all); the soft lookup uses them (default layer 0, head 0).
    query: a token position (0 is <bos>, negative counts from the end; default the last token).
    `.png`: the heatmap grid goes to `out` and the soft lookup to `lookup_path(out)`; `.html`: one page
    holding both. Returns `out`. A note goes to stderr when the text was cropped to block_size.
    """
    out = Path(out)
    kind = output_kind(out)  # a bad suffix fails before the model is loaded
    model, tok, _ = load_run(run_dir, device="cpu")
    maps = attention_maps(model, tok, text, layer, head)
    lookup = soft_lookup(model, tok, text, -1 if query is None else query, layer or 0, head or 0)
    if maps.note:
        print(f"note: {maps.note}", file=sys.stderr)
    if kind == "png":
        plot_attention(maps, out)
        plot_soft_lookup(lookup, lookup_path(out))
        return out
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
    out.write_text(page(f"Attention in {Path(run_dir).name}", sections, maps.note), encoding="utf-8")
    return out


def inspect_command(run_dir: Path | str, out_dir: Path | str, text: str) -> list[Path]:
    """Position and gate views of RUN_DIR's model, as PNGs in `out_dir`.

    Always sinusoidal.png (the encoding at the model's block_size x n_embd); position-similarity.png
    when the model has learned positions; gates-layer{L}.png for each GRU layer, over `text`.
    """
    out_dir = Path(out_dir)
    model, tok, cfg = load_run(run_dir, device="cpu")
    # gates first: an empty text fails before any file is written
    is_gru = cfg.model.mixer == "gru"
    gates = [gru_gates(model, tok, text, layer) for layer in range(cfg.model.n_layer)] if is_gru else []
    if gates and len(tok.encode(text)) + 1 > gate_limit(model):
        print(f"note: the gate view shows the last {gate_limit(model)} tokens of the text.", file=sys.stderr)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [plot_sinusoidal(out_dir / "sinusoidal.png", cfg.model.block_size, cfg.model.n_embd)]
    if cfg.model.pos == "learned":
        sim = learned_position_similarity(model)
        written.append(plot_position_similarity(sim, out_dir / "position-similarity.png"))
    for layer, (labels, r, z) in enumerate(gates):
        written.append(plot_gates(labels, r, z, out_dir / f"gates-layer{layer}.png"))
    return written
