"""What every lesson writes (a plot, a table as CSV and Markdown, a paragraph, the numbers as JSON) and the
small steps every lesson takes on the way: picking its size, and turning table columns into JSON."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqlab.inspection.figures import save_png

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass
class LessonResult:
    """The outcome of one lesson: the files it wrote and the numbers a test or a reader checks."""

    name: str
    files: list[Path]
    rows: list[dict[str, Any]]  # the table, one dict per row
    paragraph: str  # what was measured and what it shows, in plain words
    measured: dict[str, Any] = field(default_factory=dict)  # headline quantities (JSON-able)
    figure: Figure | None = None  # the plot NAME.png was drawn from, to show inline (a notebook)


def pick_size(sizes: Mapping[str, Any], size: str) -> Any:
    """The settings of `size` from a lesson's table of sizes; ValueError naming the sizes it has."""
    if size not in sizes:
        raise ValueError(f"lesson size must be one of {', '.join(sizes)}, not {size!r}")
    return sizes[size]


def columns_by(rows: Sequence[Mapping[str, Any]], label: str, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Table columns as JSON objects: {key: {str(row[label]): row[key] for each row}} for each key."""
    return {key: {str(r[label]): r[key] for r in rows} for key in keys}


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """A GitHub-style Markdown table; floats shown with 4 significant digits."""
    if not rows:
        return "(no rows)\n"
    cols = list(rows[0])

    def fmt(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_lesson(out: Path, name: str, title: str, fig: Figure, rows: Sequence[dict[str, Any]],
                 paragraph: str, measured: dict[str, Any] | None = None) -> LessonResult:
    """Write NAME.png, NAME.csv, NAME.md and NAME.json into `out`; return the result."""
    out.mkdir(parents=True, exist_ok=True)
    png, csv_path, md, js = (out / f"{name}.{ext}" for ext in ("png", "csv", "md", "json"))
    save_png(fig, png, dpi=120)
    with csv_path.open("w", newline="") as f:
        if rows:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    md.write_text(f"# {title}\n\n{paragraph.strip()}\n\n![{name}]({png.name})\n\n{markdown_table(rows)}")
    js.write_text(json.dumps({"name": name, "rows": list(rows), "measured": measured or {},
                              "paragraph": paragraph.strip()}, indent=2, default=float) + "\n")
    return LessonResult(name, [png, csv_path, md, js], list(rows), paragraph.strip(), measured or {}, fig)
