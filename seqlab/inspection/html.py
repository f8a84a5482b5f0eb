"""Self-contained HTML, the one builder for every page seqlab writes (the inspection pages, the compare
report.html): PNGs as base64 data URIs, plain tables, and weight tables shaded with CSS.

Nothing here loads anything from elsewhere (no scripts, fonts or style sheets from the network), so a
page opens the same offline, attached to an email, or years later. Values are shown as text in every
cell and as the cell's background, so the table reads without colour too.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

# tables beyond this many cells are left out of a page (the image is still there) to keep files small
MAX_TABLE_CELLS = 40_000

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
img { max-width: 100%; border: 1px solid #ddd; }
table.heat { border-collapse: collapse; font-size: 10px; font-family: ui-monospace, monospace; margin: .6em 0; }
table.heat th { font-weight: normal; padding: 1px 3px; background: #f4f4f4; white-space: pre; }
table.heat td { padding: 1px 3px; text-align: right; min-width: 2.2em; border: 1px solid #eee; }
table.heat td.masked { background: #d9d9d9; }
table.plain { border-collapse: collapse; font-size: 12px; margin: .6em 0; }
table.plain th, table.plain td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
table.plain th { background: #f4f4f4; }
.scroll { overflow-x: auto; max-width: 100%; }
p.note { color: #8a4b00; }
"""


@dataclass
class Section:
    """One part of a page: a heading ('' for none), an optional paragraph, PNG and HTML tables under it."""

    heading: str
    png: bytes | None = None
    tables: list[str] = field(default_factory=list)
    paragraph: str = ""


def png_data_uri(png: bytes) -> str:
    """The PNG as a data: URI that an <img> shows without any other file."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _cell_colour(value: float, lo: float, hi: float, diverging: bool) -> str:
    """Background for one value: blue with opacity by magnitude (red for negatives when diverging)."""
    if diverging:
        span = max(abs(lo), abs(hi)) or 1.0
        alpha = min(1.0, abs(value) / span)
        rgb = "178,24,43" if value < 0 else "33,102,172"
    else:
        alpha = min(1.0, max(0.0, (value - lo) / ((hi - lo) or 1.0)))
        rgb = "33,102,172"
    return f"background: rgba({rgb},{alpha:.3f});" + (" color: #fff;" if alpha > 0.6 else "")


def heat_table(matrix: np.ndarray, row_labels: Sequence[str], col_labels: Sequence[str], caption: str = "",
               mask: np.ndarray | None = None, lo: float | None = None, hi: float | None = None,
               diverging: bool = False, digits: int = 2) -> str:
    """An HTML table of `matrix` (R, K): labels as headers, each cell shaded by its value.

    mask (R, K) bool: True cells are shown blank on grey (e.g. future keys under a causal mask).
    lo/hi: the value range mapped to no/full colour (default the matrix's own range).
    Returns '' with a short note instead when the table would exceed MAX_TABLE_CELLS.
    """
    m = np.asarray(matrix, dtype=float)
    if m.size > MAX_TABLE_CELLS:
        return (f"<p class='note'>{html.escape(caption)}: {m.shape[0]} x {m.shape[1]} values, "
                "too many for a table; see the image.</p>")
    lo = float(np.nanmin(m)) if lo is None else lo
    hi = float(np.nanmax(m)) if hi is None else hi
    esc = html.escape
    out = ["<div class='scroll'><table class='heat'>"]
    if caption:
        out.append(f"<caption>{esc(caption)}</caption>")
    out.append("<tr><th></th>" + "".join(f"<th>{esc(c)}</th>" for c in col_labels) + "</tr>")
    for i, row in enumerate(m):
        cells = []
        for j, v in enumerate(row):
            tip = f"{row_labels[i]} / {col_labels[j]}"
            if mask is not None and mask[i, j]:
                cells.append(f"<td class='masked' title='{esc(tip, quote=True)}: masked'></td>")
            else:
                cells.append(f"<td style='{_cell_colour(v, lo, hi, diverging)}' title='{esc(tip, quote=True)}'>"
                             f"{v:.{digits}f}</td>")
        out.append(f"<tr><th>{esc(row_labels[i])}</th>{''.join(cells)}</tr>")
    out.append("</table></div>")
    return "\n".join(out)


def plain_table(rows: Sequence[dict[str, object]], caption: str = "") -> str:
    """A simple HTML table: one dict per row, keys as column headers; floats with 4 significant digits."""
    if not rows:
        return ""
    esc = html.escape
    cols = list(rows[0])

    def fmt(v: object) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    out = ["<table class='plain'>"]
    if caption:
        out.append(f"<caption>{esc(caption)}</caption>")
    out.append("<tr>" + "".join(f"<th>{esc(c)}</th>" for c in cols) + "</tr>")
    out += ["<tr>" + "".join(f"<td>{esc(fmt(r.get(c, '')))}</td>" for c in cols) + "</tr>" for r in rows]
    out.append("</table>")
    return "\n".join(out)


def page(title: str, sections: Sequence[Section], note: str = "") -> str:
    """A complete, self-contained HTML document."""
    esc = html.escape
    body = [f"<h1>{esc(title)}</h1>"]
    if note:
        body.append(f"<p class='note'>{esc(note)}</p>")
    for s in sections:
        if s.heading:
            body.append(f"<h2>{esc(s.heading)}</h2>")
        if s.paragraph:
            body.append(f"<p>{esc(s.paragraph)}</p>")
        if s.png is not None:
            body.append(f"<img alt='{esc(s.heading or title, quote=True)}' src='{png_data_uri(s.png)}'>")
        body.extend(s.tables)
    head = f"<head><meta charset='utf-8'><title>{esc(title)}</title><style>{_STYLE}</style></head>"
    return f"<!DOCTYPE html>\n<html lang='en'>{head}\n<body>\n" + "\n".join(body) + "\n</body></html>\n"
