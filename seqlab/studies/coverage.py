"""The plot of ExactMatch against coverage (`seqlab eval --plot FILE`, and the `compare` report).

Showing a suggestion only when the model is sure trades coverage (the share of word boundaries where one is
shown) for precision (ExactMatch among those shown). One line per N of ExactMatch@N over the coverages of
`seqlab.evaluation.exact_match.coverage_table`, each point with its 95% Wilson interval as an error bar.
Drawn with `seqlab.inspection.figures` (Agg, no pyplot); evaluation computes the numbers, this room draws them,
so evaluation never imports matplotlib.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqlab.inspection.figures import save_png, subplots

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def coverage_figure(curves: dict[str, list[dict[str, Any]]], ns: tuple[str, ...] = ("1", "3"),
                    title: str = "") -> Figure:
    """ExactMatch@N (%) against the coverage reached (%), one line per (curve name, N).

    `curves` maps a name (a model, a run) to `by_coverage` rows of `seqlab eval` (coverage, exact_match,
    exact_match_ci95); points without a value (no eligible position) are left out.
    """
    fig, ax = subplots(figsize=(6.4, 4.0), layout="constrained")
    for name, rows in curves.items():
        for n in ns:
            pts = [(r["coverage"], r["exact_match"].get(n), (r.get("exact_match_ci95") or {}).get(n))
                   for r in rows if r["exact_match"].get(n) is not None]
            if not pts:
                continue
            xs, ys = [100 * c for c, _, _ in pts], [100 * v for _, v, _ in pts]
            lo = [max(0.0, 100 * (v - ci[0])) if ci else 0.0 for _, v, ci in pts]
            hi = [max(0.0, 100 * (ci[1] - v)) if ci else 0.0 for _, v, ci in pts]
            label = f"{name} EM@{n}" if len(curves) > 1 else f"EM@{n}"
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=label)
    ax.set_xscale("log")
    ax.set_xticks([5, 10, 20, 50, 100], labels=["5%", "10%", "20%", "50%", "100%"])
    ax.set_xlabel("coverage: share of word boundaries where a suggestion is shown")
    ax.set_ylabel("ExactMatch among shown (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    return fig


def save_coverage_plot(result: dict[str, Any], path: Path | str, name: str = "") -> Path:
    """The plot of one `evaluate_run` result (its by_coverage rows) as a PNG at `path`."""
    rows = result.get("by_coverage") or []
    ns = tuple(n for n in ("1", "2", "3") if n in (rows[0]["exact_match"] if rows else {}))
    title = (f"{name or result.get('run_dir', '')}: {result.get('split', '')} split, "
             f"{result.get('completion_positions', 0)} positions, 95% Wilson intervals")
    return save_png(coverage_figure({name or "model": rows}, ns, title), path)
