"""Breaking runs with real processes on purpose: two trainers on one RUN_DIR, and Ctrl-C during `seqlab eval`
and `seqlab calibrate`. Every interruption lands at a known point (a child blocked there), never by timing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from trainers import BASE
from trainers import tiny_trainer as _trainer

from seqlab.config import get_preset
from seqlab.errors import UserError
from seqlab.training.trainer import Trainer

# ---------------------------------------------------------------------------------- one trainer per RUN_DIR


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "seqlab", *args]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def _long_train(data: Path, run: Path) -> subprocess.Popen[str]:
    """A training process that runs until it is stopped (100000 steps), checkpointing every 3."""
    return subprocess.Popen(_cli("train", str(data), "--out", str(run), "--preset", "tiny", "--quiet", *BASE,
                                 "train.max_steps=100000", "train.ckpt_every=3", "train.eval_every=7"),
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def _newest_step(run: Path) -> int:
    return max(json.loads(m.read_text())["step"] for m in run.glob("checkpoints/step_*/manifest.json"))


def _resume_two_more_steps(data: Path, run: Path) -> None:
    """`seqlab train --resume` two steps past RUN_DIR's newest checkpoint succeeds and says where it resumed."""
    step = _newest_step(run)
    r = subprocess.run(_cli("train", str(data), "--out", str(run), "--resume", "--quiet",
                            f"train.max_steps={step + 2}"), env=_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"resumed {run} at step {step}" in r.stdout


def test_a_second_trainer_on_a_busy_run_dir_is_refused(tiny_data_dir: Path, tmp_path: Path) -> None:
    """Old: a second fresh run was refused only with advice to pass --resume (or, before the first
    checkpoint, trained into the same folder), and a second `--resume` truncated metrics.jsonl and
    trained alongside the first, both writing checkpoints into one RUN_DIR."""
    run = tmp_path / "run"
    first = _long_train(tiny_data_dir, run)
    try:
        _wait_for(run / "manifest.json", first)
        for extra in ([], ["--resume"]):
            r = subprocess.run(_cli("train", str(tiny_data_dir), "--out", str(run), "--preset", "tiny", "--quiet",
                                    *BASE, *extra), env=_env(), capture_output=True, text=True, timeout=60)
            assert r.returncode == 2, (extra, r.stderr)
            assert str(run) in r.stderr and "another training process" in r.stderr, r.stderr
            assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
        assert first.poll() is None, "the first trainer should still be running"
    finally:
        first.send_signal(signal.SIGTERM)
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0 and "stopped by SIGTERM" in out, err
    _resume_two_more_steps(tiny_data_dir, run)  # once the first has ended, --resume takes the folder over


def test_the_lock_of_a_killed_trainer_does_not_block_the_next(tiny_data_dir: Path, tmp_path: Path) -> None:
    """SIGKILL leaves RUN_DIR/.lock behind; the OS has dropped the flock on it, so `--resume` goes on.
    (A lock kept as a file's existence, or a pid in it, would block here; the old code had no lock.)"""
    run = tmp_path / "run"
    first = _long_train(tiny_data_dir, run)
    _wait_for(run / "manifest.json", first)
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=60)
    assert (run / ".lock").exists()
    _resume_two_more_steps(tiny_data_dir, run)


def test_two_trainers_in_one_process_and_release_after_run(tiny_data_dir: Path, tmp_path: Path) -> None:
    """The lock is per open file, so it also holds between two Trainers of one process, and `run()`
    releases it when it ends (old: no lock; both trainers would write into one folder)."""
    run = tmp_path / "run"
    first = _trainer(tiny_data_dir, run, "train.max_steps=2")
    with pytest.raises(UserError, match="another training process"):
        _trainer(tiny_data_dir, run, "train.max_steps=2")
    first.run()
    assert _trainer(tiny_data_dir, run, "train.max_steps=3", resume=True).run()["steps"] == 3



def test_a_run_refused_before_it_starts_leaves_no_folder(tiny_data_dir: Path, tmp_path: Path) -> None:
    """A bad setting is refused after the lock has created RUN_DIR (old: an empty folder holding .lock was
    left behind); a folder that was there before stays, and the next run into it trains."""
    run = tmp_path / "new"
    r = subprocess.run(_cli("train", str(tiny_data_dir), "--out", str(run), "--preset", "tiny", "--quiet",
                            "model.context=init_state"), env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert not run.exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    with pytest.raises(UserError, match="context=init_state"):
        Trainer(tiny_data_dir, kept, get_preset("tiny"), overrides=["model.context=init_state"], progress=False)
    assert kept.is_dir() and not any(p.name != ".lock" for p in kept.iterdir())
    assert _trainer(tiny_data_dir, kept, "train.max_steps=1").run()["steps"] == 1


# ---------------------------------------------------------------------------- Ctrl-C in eval and calibrate

# A child that runs `seqlab ARGS...` with one function replaced by a blocker: when the child reaches it,
# it writes MARKER and then waits to be interrupted, so the test's SIGINT lands exactly there.
CHILD = textwrap.dedent("""
    import importlib, sys, time
    from pathlib import Path

    marker, target, args = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    module_name, attr = target.split(":")
    module = importlib.import_module(module_name)

    def blocked(*a, **k):
        marker.write_text("reached")
        while True:
            time.sleep(0.01)

    setattr(module, attr, blocked)
    from seqlab.cli.main import main
    sys.exit(main(args))
""")


def _interrupt_at(target: str, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    marker = tmp_path / "reached"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(marker), target, *args], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(marker, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _assert_interrupted(r: subprocess.CompletedProcess[str]) -> None:
    assert r.returncode == 130, (r.returncode, r.stderr)
    assert r.stdout == "", "partial output"
    assert r.stderr.strip().splitlines()[-1] == "seqlab: interrupted" and "Traceback" not in r.stderr, r.stderr


@pytest.fixture()
def run_copy(tiny_run_dir: Path, tmp_path: Path) -> Path:
    """A copy of the session's tiny run with an old, complete calibration.json to be kept or replaced."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run_dir, run)
    (run / "calibration.json").write_text(json.dumps({"threshold": 0.25, "note": "old"}) + "\n")
    return run


def test_ctrl_c_during_eval_prints_nothing(run_copy: Path, tmp_path: Path) -> None:
    """Interrupted while scoring completions (after the held-out loss): exit 130, one line, no report.
    The old code did this too; this keeps it so."""
    r = _interrupt_at("seqlab.evaluation.report:completion_quality", ["eval", str(run_copy), "--device", "cpu"],
                      tmp_path)
    _assert_interrupted(r)


@pytest.mark.parametrize("target", ["seqlab.evaluation.calibration:completion_quality", "os:fsync"])
def test_ctrl_c_during_calibrate_keeps_the_old_file_whole(run_copy: Path, tmp_path: Path, target: str) -> None:
    """Interrupted while scoring, or inside the write of calibration.json (its temporary file written but
    not yet synced or renamed): the old file is kept byte for byte and no temporary file is left. The old
    code did this too (the write was already atomic); this keeps it so."""
    old = (run_copy / "calibration.json").read_bytes()
    r = _interrupt_at(target, ["calibrate", str(run_copy), "--emails", "4", "--device", "cpu"], tmp_path)
    _assert_interrupted(r)
    assert (run_copy / "calibration.json").read_bytes() == old
    assert sorted(p.name for p in run_copy.iterdir() if p.name.endswith(".tmp")) == []


def test_ctrl_c_after_the_report_is_printed_is_not_a_crash(tiny_run_dir: Path) -> None:
    """The report is complete once it reaches the pipe; a Ctrl-C then lands in the interpreter's shutdown
    (about half a second with torch loaded). Old: Python had already put SIGINT back to its default
    action, so the process died by the signal (-2) with no message; now it finishes: exit 0.
    stdout is a pipe and block-buffered, so the report reaches it only as the interpreter exits, after
    `main` has returned (with PYTHONUNBUFFERED it would arrive while `main` still runs, and a Ctrl-C in
    those microseconds is an ordinary interrupt: 130 after the complete report)."""
    env = {k: v for k, v in _env().items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen(_cli("eval", str(tiny_run_dir), "--json", "--device", "cpu",
                                 "--completion-emails", "4"), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the report, flushed as the interpreter shuts down
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=60)
    assert json.loads(line)["split"] == "val" and rest == ""
    assert proc.returncode == 0, (proc.returncode, err)
    assert err == ""
