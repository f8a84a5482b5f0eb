"""The thread count chosen from the free cores (`seqlab.training.cpu_threads`): the estimate from a pair of
synthetic /proc/stat readings against the shares worked out by hand, the re-check while training, and
who wins (train.threads, then OMP_NUM_THREADS, then the free cores)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from seqlab.training.cpu_threads import CpuTimes, ThreadChooser, idle_cores, read_cpu_times, threads_for

STAT = """cpu  300 0 100 500 100 0 0 0 0 0
cpu0 100 0 50 300 50 0 0 0 0 0
cpu1 200 0 50 200 50 0 0 0 0 0
intr 12345 0 0
ctxt 999
"""


@pytest.fixture(autouse=True)
def keep_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


class FakeMachine:
    """Plays /proc/stat, the wall clock and this process's CPU clock: each `reader()` call returns the next
    reading; `advance` moves both clocks on."""

    def __init__(self, readings: list[CpuTimes]) -> None:
        self.readings, self.wall, self.cpu = list(readings), 100.0, 10.0

    def reader(self) -> CpuTimes:
        return self.readings.pop(0)

    def advance(self, wall: float, own_cores: float = 0.0) -> None:
        self.wall += wall
        self.cpu += wall * own_cores

    def chooser(self, explicit: int = 0, env: dict[str, str] | None = None, cap: int = 2) -> ThreadChooser:
        return ThreadChooser(explicit, env={} if env is None else env, reader=self.reader, cpus={0, 1}, cap=cap,
                             every=5.0, clock=lambda: self.wall, own_cpu=lambda: self.cpu,
                             sleep=lambda s: self.advance(s))


def reading(*cpus: tuple[int, int]) -> CpuTimes:
    return dict(enumerate(cpus))


def test_read_cpu_times_takes_idle_and_iowait_per_cpu(tmp_path: Path) -> None:
    path = tmp_path / "stat"
    path.write_text(STAT)
    # idle = idle + iowait; total = user + nice + system + idle + iowait + irq + softirq + steal
    assert read_cpu_times(path) == {0: (350, 500), 1: (250, 500)}
    assert read_cpu_times(tmp_path / "missing") == {}


def test_idle_cores_of_a_reading_pair() -> None:
    before = reading((1000, 5000), (2000, 5000), (0, 100))
    after = reading((1100, 5100), (2025, 5100), (100, 200))  # cpu0 all idle, cpu1 a quarter, cpu2 all
    assert idle_cores(before, after, {0, 1}) == pytest.approx(1.25)
    assert idle_cores(before, after, {1}) == pytest.approx(0.25)  # only the CPUs we may run on count
    assert idle_cores(before, after, {2}) == pytest.approx(1.0)
    assert idle_cores(before, before, {0, 1}) is None  # no jiffies passed: no estimate
    assert idle_cores(before, after, {7}) is None


@pytest.mark.parametrize(("free", "cap", "want"), [(0.0, 2, 1), (1.0, 2, 1), (1.6, 2, 1), (1.75, 2, 2),
                                                    (2.0, 2, 2), (7.9, 4, 4), (3.1, 8, 3)])
def test_threads_for_rounds_down_with_a_margin(free: float, cap: int, want: int) -> None:
    assert threads_for(free, cap) == want


def test_start_follows_the_free_cores() -> None:
    # a busy process on one core: one of the two is idle over the window
    busy = FakeMachine([reading((0, 0), (0, 0)), reading((0, 20), (20, 20))])
    chooser = busy.chooser()
    assert chooser.apply() == 1 == torch.get_num_threads()
    assert chooser.describe() == {"threads": 1, "source": "free cores", "cap": 2, "free_cores": 1.0, "changes": []}
    quiet = FakeMachine([reading((0, 0), (0, 0)), reading((19, 20), (20, 20))])
    assert quiet.chooser().apply() == 2 == torch.get_num_threads()
    # never more than torch's own default (or the CPUs we may use), however idle the machine
    many = FakeMachine([reading((0, 0), (0, 0)), reading((20, 20), (20, 20))])
    assert many.chooser(cap=1).apply() == 1


def test_hyper_threading_counts_two_cpus_as_one_core() -> None:
    # torch runs one thread per physical core: 2 here, on 4 CPUs
    idle = [reading((0, 0), (0, 0), (0, 0), (0, 0)), reading((20, 20), (20, 20), (20, 20), (20, 20))]
    m = FakeMachine(idle)
    chooser = ThreadChooser(0, env={}, reader=m.reader, cpus={0, 1, 2, 3}, cap=2, sleep=m.advance,
                            clock=lambda: m.wall, own_cpu=lambda: m.cpu)
    assert chooser.apply() == 2
    m = FakeMachine([idle[0], reading((20, 20), (20, 20), (20, 20), (0, 20))])  # one CPU busy: 1.5 cores free
    chooser = ThreadChooser(0, env={}, reader=m.reader, cpus={0, 1, 2, 3}, cap=2, sleep=m.advance,
                            clock=lambda: m.wall, own_cpu=lambda: m.cpu)
    assert chooser.apply() == 1 and chooser.free == pytest.approx(3.0)


def test_recheck_counts_own_use_as_free_and_follows_a_change() -> None:
    m = FakeMachine([reading((0, 0), (0, 0)), reading((20, 20), (20, 20)),  # quiet at start: 2 threads
                     reading((20, 520), (20, 520)),  # 5 s later: no idle jiffy, but we used 2 cores: still 2
                     reading((20, 1020), (20, 1020)),  # then we got 1.3 cores: a busy process took the rest
                     reading((520, 1520), (20, 1520))])  # then 1 idle core besides our 1: 2 again
    chooser = m.chooser()
    assert chooser.apply() == 2
    m.advance(4.0, own_cores=2.0)
    chooser.tick()  # before `every` seconds: no reading taken
    assert len(m.readings) == 3
    m.advance(1.0, own_cores=2.0)
    chooser.tick()
    assert torch.get_num_threads() == 2 and chooser.free == pytest.approx(2.0)
    m.advance(5.0, own_cores=1.3)
    chooser.tick()
    assert torch.get_num_threads() == 1 and chooser.changes == [
        {"after_s": 10.2, "from": 2, "to": 1, "free_cores": 1.3}]
    m.advance(5.0, own_cores=1.0)
    chooser.tick()
    assert torch.get_num_threads() == 2 and chooser.changes[-1]["to"] == 2


def test_explicit_threads_win_and_nothing_is_read() -> None:
    def no_reading() -> CpuTimes:
        raise AssertionError("train.threads was given: /proc/stat must not decide")

    chooser = ThreadChooser(3, env={"OMP_NUM_THREADS": "1"}, reader=no_reading, cap=2)
    assert chooser.apply() == 3 == torch.get_num_threads()  # explicit may exceed the cap: the user asked
    chooser.tick()
    assert torch.get_num_threads() == 3 and chooser.describe()["source"] == "train.threads"
    env = ThreadChooser(0, env={"OMP_NUM_THREADS": "1"}, reader=no_reading)
    env.apply()
    env.tick()
    assert env.describe()["source"] == "OMP_NUM_THREADS"


def test_without_proc_stat_the_cap_is_used() -> None:
    chooser = ThreadChooser(0, env={}, reader=dict, cpus={0, 1}, cap=2, sleep=lambda s: None)
    assert chooser.apply() == 2 and chooser.describe()["free_cores"] is None


def test_trainer_takes_explicit_threads_and_says_so_in_run_json(tiny_data_dir: Path, tmp_path: Path) -> None:
    from seqlab.config import apply_overrides, get_preset
    from seqlab.training.trainer import train

    cfg = apply_overrides(get_preset("tiny"), ["train.max_steps=1", "train.threads=2", "train.eval_every=1"])
    train(tiny_data_dir, tmp_path / "run", cfg, progress=False)
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["threads"] == 2
    assert info["thread_choice"]["source"] == "train.threads" and info["thread_choice"]["threads"] == 2
