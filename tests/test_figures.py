"""figures: the one way studies draw. Importing a drawing module loads no matplotlib, drawing never loads
pyplot (no global backend or figure registry), and the PNG bytes and the saved file are the same picture."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from seqlab.inspection.figures import png_bytes, save_png, subplots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_no_matplotlib_at_import_and_no_pyplot_when_drawing() -> None:
    code = textwrap.dedent("""
        import sys
        import seqlab.studies.compare.report, seqlab.inspection.plots, seqlab.studies.lessons.common
        from seqlab.inspection.figures import png_bytes, subplots
        assert "matplotlib" not in sys.modules, "imported at import time"
        fig, ax = subplots(figsize=(2, 2))
        ax.plot([0, 1], [1, 0])
        assert png_bytes(fig)[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
        assert "matplotlib.pyplot" not in sys.modules, "pyplot used"
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_saved_png_is_the_bytes(tmp_path: Path) -> None:
    fig, axes = subplots(1, 2, figsize=(4, 2), layout="constrained")
    for ax in axes:
        ax.bar([0, 1], [2, 3])
    data = png_bytes(fig, dpi=50)
    path = save_png(fig, tmp_path / "sub" / "f.png", dpi=50)
    assert data[:8] == PNG_SIGNATURE and path.read_bytes() == data
