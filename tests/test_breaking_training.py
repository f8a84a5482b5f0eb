"""Breaking training and its readers on purpose: non-finite losses and gradients, non-finite weights and
validation losses, two trainers on one RUN_DIR, and Ctrl-C during `seqlab eval` and `seqlab calibrate`.

Every failure is injected deterministically (a wrapped forward pass, a gradient hook, a patched optimizer
step or a child process blocked at a known point), never by timing.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from seqlab.cli.main import main
from seqlab.config import apply_overrides, get_preset
from seqlab.errors import UserError
from seqlab.training.trainer import Trainer

NAN = float("nan")
BASE = ["train.threads=1", "train.log_every=1"]


def _trainer(data: Path, run: Path, *overrides: str, resume: bool = False) -> Trainer:
    if resume:
        return Trainer(data, run, resume=resume, overrides=list(overrides), progress=False)
    return Trainer(data, run, apply_overrides(get_preset("tiny"), [*BASE, *overrides]), progress=False)


def _params(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in trainer.model.named_parameters()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _watch_steps(trainer: Trainer, bad: Callable[[int], bool]) -> dict[int, dict[str, torch.Tensor]]:
    """Wrap the trainer's forward pass: record the weights each step starts from, and make the logits NaN
    (so the loss and every gradient are NaN) at the steps where `bad(step)` holds."""
    model, before = trainer.step_model, {}

    def forward(x: torch.Tensor, state: Any = None, reset: Any = None) -> tuple[torch.Tensor, Any]:
        step = trainer.progress.step
        before.setdefault(step, _params(trainer))
        logits, new_state = model(x, state=state, reset=reset)
        return (logits * NAN if bad(step) else logits), new_state

    trainer.step_model = forward
    return before


def _strict_json(line: str) -> dict[str, Any]:
    """json.loads that refuses NaN and Infinity, which are not JSON (jq and most parsers reject them)."""
    def refuse(token: str) -> None:
        raise ValueError(f"{token} is not JSON")
    return json.loads(line, parse_constant=refuse)


def _metrics(run: Path) -> list[dict[str, Any]]:
    return [_strict_json(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _saved_weight_files(run: Path) -> list[Path]:
    return sorted(run.rglob("model.safetensors"))


def _assert_all_saved_weights_finite(run: Path) -> None:
    files = _saved_weight_files(run)
    assert files, "nothing was saved"
    for f in files:
        bad = [k for k, v in load_file(f).items() if not torch.isfinite(v).all()]
        assert not bad, f"{f} holds non-finite weights: {bad}"


def _adam_steps(trainer: Trainer) -> set[int]:
    return {int(st["step"]) for st in trainer.opt.state.values()}


# ---------------------------------------------------------------------------------------- non-finite steps


@pytest.mark.parametrize("mixer", ["attention", "gru"])
def test_a_nan_loss_step_is_skipped_and_said(tiny_data_dir: Path, tmp_path: Path, mixer: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Old: the NaN gradients of step 2 went into AdamW, every weight became NaN, and nothing was said.
    (The GRU trains on streams: the hidden state it carries must not take the bad step's either.)"""
    extra = ["model.mixer=gru", "model.pos=none"] if mixer == "gru" else []
    trainer = _trainer(tiny_data_dir, tmp_path / "run", "train.max_steps=6", "train.eval_every=100",
                       "train.ckpt_every=100", *extra)
    before = _watch_steps(trainer, lambda step: step == 2)
    states: dict[int, Any] = {}
    real_train_step = trainer.train_step

    def train_step(step: int) -> tuple[float, str | None]:
        out = real_train_step(step)
        states[step] = trainer.stream_state
        return out

    trainer.train_step = train_step
    summary = trainer.run()
    assert states[2] is states[1], "the bad step's carried state was kept"
    assert not _same(before[1], before[2]), "a good step should move the weights"
    assert _same(before[2], before[3]), "the NaN step was applied"
    assert _adam_steps(trainer) == {5}, "the optimizer stepped on the NaN step"
    assert summary["steps"] == 6 and summary["skipped_steps"] == 1 and not summary["failed"]
    skipped = [r for r in _metrics(tmp_path / "run") if "skipped" in r]
    assert skipped == [{"step": 3, "skipped": "non-finite loss", "bad_in_a_row": 1,
                        "elapsed": skipped[0]["elapsed"]}]
    err = capsys.readouterr().err
    assert "step 3 skipped: non-finite loss" in err and err.count("skipped") == 1
    _assert_all_saved_weights_finite(tmp_path / "run")


@pytest.mark.parametrize("grad_clip", [1.0, 0.0])
def test_an_infinite_gradient_norm_is_a_bad_step(tiny_data_dir: Path, tmp_path: Path, grad_clip: float) -> None:
    """Old: with a finite loss but an infinite gradient, clipping turned the gradients into NaN (inf * 0)
    and AdamW applied them; without clipping AdamW applied inf / inf = NaN updates."""
    trainer = _trainer(tiny_data_dir, tmp_path / "run", "train.max_steps=5", "train.eval_every=100",
                       "train.ckpt_every=100", f"train.grad_clip={grad_clip}")
    before = _watch_steps(trainer, lambda step: False)
    first = next(trainer.model.parameters())
    first.register_hook(lambda g: g + math.inf if trainer.progress.step == 1 else g)
    summary = trainer.run()
    assert _same(before[1], before[2]) and not _same(before[2], before[3])
    assert _adam_steps(trainer) == {4}
    assert summary["skipped_steps"] == 1
    assert [r["skipped"] for r in _metrics(tmp_path / "run") if "skipped" in r] == ["non-finite gradient norm"]
    _assert_all_saved_weights_finite(tmp_path / "run")


def test_repeated_bad_steps_stop_the_run_and_keep_the_last_good_checkpoint(tiny_data_dir: Path,
                                                                           tmp_path: Path) -> None:
    """Old: a run whose loss stayed NaN trained on to train.max_steps, saving NaN weights at every
    checkpoint (best/ excepted only because NaN < x is false)."""
    run = tmp_path / "run"
    trainer = _trainer(tiny_data_dir, run, "train.max_steps=40", "train.eval_every=2", "train.ckpt_every=2",
                       "train.max_bad_steps=3")
    before = _watch_steps(trainer, lambda step: step >= 4)
    summary = trainer.run()
    # steps 4, 5 and 6 (0-based) are bad: the run stops when the third of them is done
    assert summary["steps"] == 7 and summary["skipped_steps"] == 3
    assert "3 steps in a row" in summary["stopped"] and "train.max_bad_steps" in summary["stopped"]
    assert "step 6" in summary["stopped"], "the reason names the last good checkpoint"
    _assert_all_saved_weights_finite(run)
    assert _same(before[4], _params(trainer)), "the last good weights are the ones kept"
    assert json.loads((run / "manifest.json").read_text())["step"] == 6, "nothing saved after the stop"
    mirror = load_file(run / "model.safetensors")
    assert all(torch.equal(mirror[k], v) for k, v in _params(trainer).items() if k in mirror)
    # the kept checkpoint goes on once the cause is gone
    again = _trainer(tiny_data_dir, run, "train.max_steps=9", resume=True)
    assert again.progress.step == 6
    assert again.run()["steps"] == 9
    _assert_all_saved_weights_finite(run)


def test_non_finite_weights_are_never_saved(tiny_data_dir: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A step with a finite loss and gradient that still leaves a NaN weight (an overflow in the update).
    Old: the NaN weights were saved as the step checkpoint and the mirror, and training went on."""
    run = tmp_path / "run"
    trainer = _trainer(tiny_data_dir, run, "train.max_steps=20", "train.eval_every=100", "train.ckpt_every=2")
    real_step = trainer.opt.step

    def step_then_break(*args: Any, **kwargs: Any) -> Any:
        out = real_step(*args, **kwargs)
        if trainer.progress.step == 2:  # the third step, before the checkpoint at step 4
            with torch.no_grad():
                next(trainer.model.parameters()).view(-1)[0] = NAN
        return out

    trainer.opt.step = step_then_break
    summary = trainer.run()
    assert "non-finite" in summary["stopped"] and summary["steps"] == 4
    _assert_all_saved_weights_finite(run)
    assert json.loads((run / "manifest.json").read_text())["step"] == 2
    assert "not saving step 4" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [NAN, math.inf, -math.inf])
def test_a_non_finite_validation_loss_never_becomes_the_best(tiny_data_dir: Path, tmp_path: Path,
                                                              bad: float) -> None:
    """Old: -inf < best made a -inf validation loss the best for good (nothing finite ever beat it), and
    a NaN or infinite one was written to metrics.jsonl as NaN/Infinity, which is not JSON."""
    run = tmp_path / "run"
    trainer = _trainer(tiny_data_dir, run, "train.max_steps=6", "train.eval_every=2", "train.ckpt_every=100")
    real_evaluate, calls = trainer.evaluate, []

    def evaluate() -> dict[str, float]:
        calls.append(trainer.progress.step)
        ev = real_evaluate()
        return {k: bad for k in ev} if trainer.progress.step == 4 else ev

    trainer.evaluate = evaluate
    summary = trainer.run()
    assert calls == [2, 4, 6]
    assert math.isfinite(summary["best_val_loss"]) and summary["best_step"] in (2, 6)
    assert json.loads((run / "best" / "manifest.json").read_text())["step"] == summary["best_step"]
    at_4 = [r for r in _metrics(run) if r["step"] == 4 and "val_loss" in r]
    assert at_4 and at_4[0]["val_loss"] is None


def test_seqlab_train_that_halts_exits_2_and_says_why(tiny_data_dir: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Every loss NaN (the training loss only; validation is scored by its own loop). Old: `seqlab train`
    applied every NaN step, trained to train.max_steps, saved NaN weights and exited 0."""
    import seqlab.training.trainer as trainer_module

    real_loss = trainer_module.lm_loss
    monkeypatch.setattr(trainer_module, "lm_loss", lambda logits, y: real_loss(logits, y) * NAN)
    run = tmp_path / "run"
    code = main(["train", str(tiny_data_dir), "--out", str(run), "--preset", "tiny", "--quiet", *BASE])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2  # the default train.max_bad_steps is 5
    assert err[-1].startswith("seqlab: error: stopped at step 5: the loss or its gradient was non-finite at 5 steps")
    assert "no checkpoint was saved" in err[-1]
    assert not list(run.rglob("model.safetensors"))


def test_max_bad_steps_is_validated() -> None:
    with pytest.raises(ValueError, match="train.max_bad_steps must be at least 1"):
        apply_overrides(get_preset("tiny"), ["train.max_bad_steps=0"])


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
    # once the first has ended, --resume takes the folder over
    step = _newest_step(run)
    r = subprocess.run(_cli("train", str(tiny_data_dir), "--out", str(run), "--resume", "--quiet",
                            f"train.max_steps={step + 2}"), env=_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"resumed {run} at step {step}" in r.stdout


def test_the_lock_of_a_killed_trainer_does_not_block_the_next(tiny_data_dir: Path, tmp_path: Path) -> None:
    """SIGKILL leaves RUN_DIR/.lock behind; the OS has dropped the flock on it, so `--resume` goes on.
    (A lock kept as a file's existence, or a pid in it, would block here; the old code had no lock.)"""
    run = tmp_path / "run"
    first = _long_train(tiny_data_dir, run)
    _wait_for(run / "manifest.json", first)
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=60)
    assert (run / ".lock").exists()
    step = _newest_step(run)
    r = subprocess.run(_cli("train", str(tiny_data_dir), "--out", str(run), "--resume", "--quiet",
                            f"train.max_steps={step + 2}"), env=_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"resumed {run} at step {step}" in r.stdout


def test_two_trainers_in_one_process_and_release_after_run(tiny_data_dir: Path, tmp_path: Path) -> None:
    """The lock is per open file, so it also holds between two Trainers of one process, and `run()`
    releases it when it ends (old: no lock; both trainers would write into one folder)."""
    run = tmp_path / "run"
    first = _trainer(tiny_data_dir, run, "train.max_steps=2")
    with pytest.raises(UserError, match="another training process"):
        _trainer(tiny_data_dir, run, "train.max_steps=2")
    first.run()
    assert _trainer(tiny_data_dir, run, "train.max_steps=3", resume=True).run()["steps"] == 3


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
    r = _interrupt_at("seqlab.evaluation.run:completion_quality", ["eval", str(run_copy), "--device", "cpu"],
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
