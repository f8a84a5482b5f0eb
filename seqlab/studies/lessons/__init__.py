"""The lecture's experiments, one module each, run by `seqlab lesson NAME --out DIR`.

Every lesson module has `SIZES` (one entry per name in `SIZES` below) and `run(out: Path, *, size: str,
seed: int = 0, progress: bool = True) -> LessonResult`, and writes into `out`: `NAME.png` (the plot),
`NAME.csv` and `NAME.md` (the table and a paragraph saying what was measured and what it shows), and
`NAME.json` (the measured numbers). Size "tiny" takes seconds (the tests use it); "small" is the real
measurement. `LESSONS` says how long each size took on 2 CPU cores and which size runs by default: the
largest that finishes in about a minute.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

from seqlab.studies.lessons.common import LessonResult

SIZES = ("tiny", "small")


@dataclass(frozen=True)
class Lesson:
    """One lesson: its CLI name, its module, what a run does, and how long each size takes."""

    name: str
    module: str  # under seqlab.studies.lessons
    does: str  # what a run does, in a few words, said before it starts
    times: dict[str, str]  # size -> wall-clock time of `seqlab lesson NAME --size SIZE` on 2 CPU cores
    default_size: str

    def announce(self, size: str) -> str:
        """What is about to happen, and for how long, before a run of `size`."""
        others = "; ".join(f"size {s} takes about {t}" for s, t in self.times.items() if s != size)
        return f"lesson {self.name}, size {size} (about {self.times[size]} on 2 CPU cores): {self.does} ({others})"


# The times told before a lesson runs: wall-clock of `seqlab lesson NAME --size SIZE --out DIR --quiet` on a
# 2-core machine shared with other jobs, rounded up, Python and torch start-up included (the runs behind them
# are in the experiments index).
LESSONS: dict[str, Lesson] = {lesson.name: lesson for lesson in (
    Lesson("permutation", "permutation", "one self-attention layer, with and without each kind of position",
           {"tiny": "5 s", "small": "5 s"}, "small"),
    Lesson("scaling", "scaling", "softmax over random scores, with and without 1/sqrt(d_k)",
           {"tiny": "5 s", "small": "5 s"}, "small"),
    Lesson("gradient-path", "gradient_path",
           "trains an RNN, a GRU, a minGRU and attention, then measures their gradients against distance",
           {"tiny": "5 s", "small": "1.5 min"}, "small"),
    Lesson("parallel", "parallel", "times one training step of six mixer layers at growing lengths",
           {"tiny": "5 s", "small": "20 s"}, "small"),
    # tiny is the default here only for its time: 40 steps are too few to learn the recall, so the
    # models stay near chance; small (3000 steps) is what separates the architectures
    Lesson("memory", "memory",
           "trains an RNN, a GRU, a minGRU and attention on recall probes, then measures recall against "
           "distance; only size small trains long enough to learn the recall",
           {"tiny": "10 s", "small": "15 min"}, "tiny"),
)}


def run_lesson(name: str, out: Path, *, size: str | None = None, seed: int = 0,
               progress: bool = True) -> LessonResult:
    """Run one lesson by its CLI name at `size` (default: the lesson's default size); ValueError for an
    unknown name or size. With `progress`, say first what the run will do and how long it takes."""
    if name not in LESSONS:
        raise ValueError(f"unknown lesson {name!r}; choose one of {', '.join(LESSONS)}")
    lesson = LESSONS[name]
    size = size or lesson.default_size
    if size not in lesson.times:
        raise ValueError(f"lesson size must be one of {', '.join(lesson.times)}, not {size!r}")
    if progress:
        print(lesson.announce(size), file=sys.stderr, flush=True)
    module = importlib.import_module(f"seqlab.studies.lessons.{lesson.module}")
    return module.run(Path(out), size=size, seed=seed, progress=progress)
