"""What the lesson tests share: one run of a lesson at size tiny (as a fixture), and the check of the four
files it writes."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from seqlab.studies.lessons import run_lesson
from seqlab.studies.lessons.common import LessonResult

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_tiny(name: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[LessonResult, Path]:
    """Lesson `name` at size tiny, seed 0, quiet, in a fresh folder: (result, that folder)."""
    out = tmp_path_factory.mktemp(name)
    return run_lesson(name, out, size="tiny", seed=0, progress=False), out


def tiny_lesson_fixture(name: str) -> Callable[..., tuple[LessonResult, Path]]:
    """A module-scoped fixture that runs lesson `name` once at size tiny: bind it to the fixture's name,
    `permutation = tiny_lesson_fixture("permutation")`."""

    @pytest.fixture(scope="module")
    def lesson(tmp_path_factory: pytest.TempPathFactory) -> tuple[LessonResult, Path]:
        return run_tiny(name, tmp_path_factory)

    return lesson


def check_lesson_files(result: LessonResult, out: Path, name: str, *, trained: bool = False) -> None:
    """The four files exist and are non-empty, the PNG is a PNG, CSV/JSON/Markdown hold the table; a lesson
    that `trained` models also keeps its data and runs in `out/work`."""
    expected = [out / f"{name}.{ext}" for ext in ("png", "csv", "md", "json")]
    assert result.files == expected
    for path in expected:
        assert path.stat().st_size > 0, path
    assert expected[0].read_bytes()[:8] == PNG_SIGNATURE
    with expected[1].open() as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(result.rows) > 0
    assert list(table[0]) == list(result.rows[0])
    md = expected[2].read_text()
    assert result.paragraph in md and f"![{name}]({name}.png)" in md
    assert md.count("\n|") >= len(result.rows) + 1  # header and separator, then one line per row
    data = json.loads(expected[3].read_text())
    assert data["name"] == name and data["paragraph"] == result.paragraph
    assert len(data["rows"]) == len(result.rows)
    assert (out / "work").is_dir() == trained
