"""Breaking training on purpose: non-finite losses and gradients, non-finite weights and validation losses.
(Two trainers on one RUN_DIR and Ctrl-C in eval/calibrate: test_breaking_processes.py.)

Every failure is injected deterministically (a wrapped forward pass, a gradient hook, a patched optimizer
step or a child process blocked at a known point), never by timing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from trainers import BASE
from trainers import tiny_trainer as _trainer

from seqlab.cli.main import main
from seqlab.config import apply_overrides, get_preset
from seqlab.training.trainer import Trainer

NAN = float("nan")


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
