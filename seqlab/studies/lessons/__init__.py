"""The lecture's experiments, one module each, run by `seqlab lesson NAME --out DIR`.

Every lesson module has `run(out: Path, *, size: str = "small", seed: int = 0, progress: bool = True)
-> LessonResult` and writes into `out`: `NAME.png` (the plot), `NAME.csv` and `NAME.md` (the table and a
paragraph saying what was measured and what it shows), and `NAME.json` (the measured numbers). `size`
"tiny" is for tests (seconds), "small" for a person at a 2-core CPU (minutes).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from seqlab.studies.lessons.common import LessonResult

# lesson name (CLI) -> module under seqlab.studies.lessons
LESSONS: dict[str, str] = {
    "permutation": "permutation",
    "scaling": "scaling",
    "gradient-path": "gradient_path",
    "parallel": "parallel",
    "memory": "memory",
}


def run_lesson(name: str, out: Path, *, size: str = "small", seed: int = 0, progress: bool = True) -> LessonResult:
    """Run one lesson by its CLI name; ValueError for an unknown name or size."""
    if name not in LESSONS:
        raise ValueError(f"unknown lesson {name!r}; choose one of {', '.join(LESSONS)}")
    if size not in ("tiny", "small"):
        raise ValueError(f"lesson size must be tiny or small, not {size!r}")
    module = importlib.import_module(f"seqlab.studies.lessons.{LESSONS[name]}")
    return module.run(Path(out), size=size, seed=seed, progress=progress)
