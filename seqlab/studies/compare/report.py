"""The files of a `seqlab compare` report, all made from the results dict alone (`compare_runs.compare`).

    report.md     the table, the budget and the plots (PNG files in plots/)
    results.csv   one row per model, then the xz reference row
    results.json  everything, including the validation curves
    report.html   the same as report.md in one file (`seqlab.inspection.html`: inline CSS, images as data
                  URIs, no scripts, nothing fetched from a network)

Plots are made with `seqlab.inspection.figures` (no pyplot); each model keeps its recipe's colour.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqlab.inspection.figures import png_bytes, subplots
from seqlab.inspection.html import Section, page, plain_table
from seqlab.studies.recipes import RECIPES

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# (key in a row, column title, format); the table of every output format
COLUMNS = [
    ("model", "model", "{}"), ("params", "params", "{:,}"), ("params_ratio", "x ref", "{:.3f}"),
    ("steps", "steps", "{:,}"), ("tokens_per_s", "tokens/s", "{:,.0f}"), ("peak_mem_mb", "peak MiB", "{:,.1f}"),
    ("train_s", "train s", "{:,.1f}"), ("val_bpb", "val bpb", "{:.3f}"), ("test_bpb", "test bpb", "{:.3f}"),
    ("val_ppl", "val ppl", "{:.2f}"), ("test_ppl", "test ppl", "{:.2f}"), ("em1", "EM@1", "{:.1%}"),
    ("em2", "EM@2", "{:.1%}"), ("em3", "EM@3", "{:.1%}"), ("coverage", "coverage", "{:.1%}"),
    ("em1_low", "EM@1 low", "{:.1%}"), ("em3_low", "EM@3 low", "{:.1%}"), ("coverage_low", "cov low", "{:.1%}"),
]
CSV_FIELDS = ["model", "mixer", "pos", "n_layer", "n_embd", "n_head", "params", "params_ratio", "steps", "tokens",
              "tokens_per_s", "train_s", "peak_mem_mb", "val_loss", "val_ppl", "val_bpb", "test_loss", "test_ppl",
              "test_bpb", "em1", "em2", "em3", "coverage", "threshold", "em1_low", "em3_low", "coverage_low",
              "positions", "stopped", "reused"]


def _cell(value: Any, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def table_rows(results: dict[str, Any]) -> list[list[str]]:
    """Header, one formatted row per model, then the xz row (bits per byte only)."""
    rows = [[title for _, title, _ in COLUMNS]]
    rows += [[_cell(r.get(key), fmt) for key, _, fmt in COLUMNS] for r in results["rows"]]
    xz = {"model": "xz -9e", "val_bpb": results["xz"].get("val"), "test_bpb": results["xz"].get("test")}
    rows.append([_cell(xz.get(key), fmt) for key, _, fmt in COLUMNS])
    return rows


def format_table(results: dict[str, Any]) -> str:
    """The comparison as an aligned plain-text table for a terminal."""
    rows = table_rows(results)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([*lines, "", _caption(results)])


def _caption(results: dict[str, Any]) -> str:
    b = results["budget"]
    return (f"Budget: {b['description']} (preset {results['preset']}, seed {results['seed']}). Parameters "
            f"matched to the attention reference of {results['reference_params']:,}"
            f"{'' if results['match_params'] else ' (matching off)'}. ExactMatch of greedy completions on "
            f"the test split at the threshold giving {results['coverage']:.0%} coverage, and (low) at the one "
            f"giving {results.get('low_coverage', 0.1):.0%}{_low_ci(results)}. bpb: bits per byte "
            f"of the whole split; xz -9e on the same bytes for reference.")


def _low_ci(results: dict[str, Any]) -> str:
    """The widest 95% Wilson interval of EM@1 at the low coverage: how far apart two models must be."""
    widths = [r["em1_low_ci95"][1] - r["em1_low_ci95"][0] for r in results["rows"] if r.get("em1_low_ci95")]
    return f" (95% Wilson interval of EM@1 there up to {max(widths):.0%} wide)" if widths else ""


# ---------------------------------------------------------------- plots


def _figure() -> tuple[Figure, Any]:
    return subplots(figsize=(7.0, 4.2), layout="constrained")


def _curve_plot(results: dict[str, Any], column: int, xlabel: str) -> Figure:
    """Validation bits per byte (the trainer's fixed validation emails) against step or seconds."""
    fig, ax = _figure()
    for name, points in results["curves"].items():
        if points:
            ax.plot([p[column] for p in points], [p[2] for p in points], marker=".", label=name,
                    color=RECIPES[name].color)
    if results["xz"].get("val") is not None:
        ax.axhline(results["xz"]["val"], color="gray", linestyle="--", label="xz -9e (val)")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("validation bits per byte")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _params_plot(results: dict[str, Any]) -> Figure:
    """Whole-split validation bits per byte against parameter count, one labelled point per model."""
    fig, ax = _figure()
    groups: dict[int, list[dict[str, Any]]] = {}
    for r in results["rows"]:  # models of equal size share an x: fan their labels out vertically
        groups.setdefault(r["params"], []).append(r)
    values = [r["val_bpb"] for r in results["rows"]] + [v for v in [results["xz"].get("val")] if v is not None]
    slot = 0.06 * (max(values) - min(values) or 1.0)  # vertical distance between stacked labels, data units
    for params, group in groups.items():
        group.sort(key=lambda r: -r["val_bpb"])
        center = sum(r["val_bpb"] for r in group) / len(group)
        for k, r in enumerate(group):
            ax.scatter(params, r["val_bpb"], color=RECIPES[r["model"]].color)
            ax.annotate(r["model"], (params, r["val_bpb"]), xytext=(8, center + slot * ((len(group) - 1) / 2 - k)),
                        textcoords=("offset points", "data"), fontsize=8, va="center",
                        arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.6} if len(group) > 1 else None)
    if results["xz"].get("val") is not None:
        ax.axhline(results["xz"]["val"], color="gray", linestyle="--", label="xz -9e (val)")
        ax.legend(fontsize=8)
    ax.set_xlabel("parameters")
    ax.set_ylabel("validation bits per byte (whole split)")
    ax.grid(alpha=0.3)
    return fig


def _plots(results: dict[str, Any]) -> list[tuple[str, str, Figure]]:
    return [
        ("val_bpb_vs_step", "Validation bits per byte against training step", _curve_plot(results, 0, "step")),
        ("val_bpb_vs_time", "Validation bits per byte against training time",
         _curve_plot(results, 1, "training seconds (evaluation excluded)")),
        ("val_bpb_vs_params", "Bits per byte against parameters", _params_plot(results)),
    ]


# ---------------------------------------------------------------- the files


def _markdown(results: dict[str, Any], images: list[tuple[str, str]]) -> str:
    rows = table_rows(results)
    table = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join("---" for _ in rows[0]) + "|"]
    table += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    parts = ["# Model comparison", "", _caption(results), "", *table, ""]
    for title, path in images:
        parts += [f"## {title}", "", f"![{title}]({path})", ""]
    return "\n".join(parts)


def _html(results: dict[str, Any], images: list[tuple[str, bytes]]) -> str:
    header, *rows = table_rows(results)
    table = plain_table([dict(zip(header, row)) for row in rows])
    sections = [Section("", tables=[table], paragraph=_caption(results))]
    sections += [Section(title, png) for title, png in images]
    return page("Model comparison", sections)


def _csv(path: Path, results: dict[str, Any]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(results["rows"])
        writer.writerow({"model": "xz -9e", "val_bpb": results["xz"].get("val"), "test_bpb": results["xz"].get("test")})


def write_report(out: Path, results: dict[str, Any]) -> list[Path]:
    """Write report.md, results.csv, results.json, report.html and plots/*.png into `out`; their paths."""
    out = Path(out)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    pngs: list[tuple[str, str, bytes]] = []
    for name, title, fig in _plots(results):
        png = png_bytes(fig)
        (out / "plots" / f"{name}.png").write_bytes(png)
        pngs.append((name, title, png))
    paths = [out / n for n in ("report.md", "results.csv", "results.json", "report.html")]
    paths[0].write_text(_markdown(results, [(t, f"plots/{n}.png") for n, t, _ in pngs]), encoding="utf-8")
    _csv(paths[1], results)
    paths[2].write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    paths[3].write_text(_html(results, [(t, png) for _, t, png in pngs]), encoding="utf-8")
    return paths + [out / "plots" / f"{n}.png" for n, _, _ in pngs]
