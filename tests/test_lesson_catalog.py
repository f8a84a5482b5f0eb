"""The table of lessons: every lesson module has exactly the sizes the table times, a default among them,
and `seqlab lesson --help` and the announcement before a run give those times."""

from __future__ import annotations

import importlib

import pytest

from seqlab.cli.main import build_parser
from seqlab.cli.studies import lesson_times
from seqlab.studies.lessons import LESSONS, SIZES, run_lesson


@pytest.mark.parametrize("name", list(LESSONS))
def test_each_lesson_module_has_the_timed_sizes(name: str) -> None:
    lesson = LESSONS[name]
    module = importlib.import_module(f"seqlab.studies.lessons.{lesson.module}")
    assert tuple(module.SIZES) == tuple(lesson.times) == SIZES
    assert lesson.default_size in SIZES
    announced = lesson.announce("small")
    assert lesson.times["small"] in announced and lesson.times["tiny"] in announced


def test_help_lists_every_lesson_with_its_times(capsys: pytest.CaptureFixture[str]) -> None:
    table = lesson_times()
    for lesson in LESSONS.values():
        line = next(x for x in table.splitlines() if x.split()[:1] == [lesson.name])
        for size, time in lesson.times.items():
            assert f"{size} {time}" in line
        assert f"{lesson.default_size} {lesson.times[lesson.default_size]} *" in line
    with pytest.raises(SystemExit):
        build_parser().parse_args(["lesson", "--help"])
    assert table in capsys.readouterr().out


def test_unknown_lesson_or_size_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown lesson"):
        run_lesson("no-such-lesson", tmp_path)
    with pytest.raises(ValueError, match="lesson size"):
        run_lesson("scaling", tmp_path, size="huge")
    assert list(tmp_path.iterdir()) == []


def test_a_run_says_first_what_it_will_do(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_lesson("scaling", tmp_path)  # no size: the lesson's default
    err = capsys.readouterr().err
    assert err.splitlines()[0] == LESSONS["scaling"].announce(LESSONS["scaling"].default_size)
    assert result.files[0].parent == tmp_path
