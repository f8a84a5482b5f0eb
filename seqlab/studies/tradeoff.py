"""The trade-off curve of the suggestion rules (`seqlab tradeoff RUN_DIR --out DIR`): saved characters
against wrong suggestions shown per 100 words, one line per rule, one point per threshold.

Evaluation computes the rows (`seqlab.evaluation.saved_chars.tradeoff_curve`); this room writes them as a
Markdown table and draws them (Agg, through `seqlab.inspection.figures`). A rule whose line lies above and to
the left of another saves more characters for the same number of wrong suggestions: docs/suggestions.md
reads the default from this figure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqlab.inspection.figures import save_png, subplots

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def format_tradeoff(rows: list[dict[str, Any]]) -> str:
    """The curve as a Markdown table: rule, threshold, saved share, wrong per 100 words, shown, accepted."""
    lines = ["| rule | threshold | saved chars | wrong / 100 words | shown | accepted | wrong |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        unit = " chars" if r["rule"] == "expected-chars" else ""
        lines.append(f"| {r['rule']} | {r['threshold']:g}{unit} | {100 * (r['saved'] or 0):.1f}% | "
                     f"{r['wrong_per_100_words'] or 0:.2f} | {r['shown']} | {r['accepted']} | {r['wrong']} |")
    return "\n".join(lines)


def tradeoff_figure(rows: list[dict[str, Any]], title: str = "", cap: float | None = None) -> Figure:
    """Saved characters (%) against wrong suggestions per 100 words, one line per rule; a dashed line at `cap`."""
    fig, ax = subplots(figsize=(6.4, 4.0), layout="constrained")
    for rule in dict.fromkeys(r["rule"] for r in rows):
        pts = sorted((r["wrong_per_100_words"] or 0.0, 100 * (r["saved"] or 0.0)) for r in rows if r["rule"] == rule)
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=rule)
    if cap is not None:
        ax.axvline(cap, linestyle="--", color="grey", label=f"{cap:g} wrong per 100 words")
    # linear below 1 wrong per 100 words, logarithmic above: the useful defaults sit at a few per 100
    # words, and showing everything reaches 80 or more
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(left=0.0)
    ax.set_xlabel("wrong suggestions shown per 100 words typed (symlog)")
    ax.set_ylabel("characters saved (% of typed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    return fig


def save_tradeoff(result: dict[str, Any], out: Path | str, name: str = "") -> list[Path]:
    """tradeoff.json, tradeoff.md and tradeoff.png of a `Run.tradeoff` result in the folder `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = result["curve"]
    (out / "tradeoff.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (out / "tradeoff.md").write_text(format_tradeoff(rows) + "\n", encoding="utf-8")
    title = (f"{name}: {result['split']} split, {result['emails']} emails typed for up to "
             f"{result['words_per_email']} words, {result['max_words']}-word suggestions"
             + (f", asked at {'word starts' if result.get('ask') == 'word-starts' else 'every letter'}"
                if result.get("ask") else "")
             + (f", also asked {result['mid_word']} letter(s) into each word" if result.get("mid_word") else ""))
    png = save_png(tradeoff_figure(rows, title, result.get("max_wrong_per_100")), out / "tradeoff.png")
    return [out / "tradeoff.json", out / "tradeoff.md", png]
