"""The trainer: loss drops, resume after SIGKILL is bitwise exact, corrupt checkpoints fall back, signals save."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from seqlab.config import apply_overrides, get_preset
from seqlab.training.optim import lr_at
from seqlab.training.trainer import Trainer

TINY = ["train.threads=1", "train.log_every=1"]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "seqlab", *args]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def test_lr_schedule_warms_up_then_decays() -> None:
    lrs = [lr_at(s, 1.0, 10, 100, 0.1) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))
    assert lrs[-1] == pytest.approx(0.1, abs=1e-3)
    # a wall-clock budget paces the decay when it runs out before the step budget
    assert lr_at(20, 1.0, 10, 1000, 0.1, time_frac=1.0) == pytest.approx(0.1)
    assert lr_at(20, 1.0, 10, 1000, 0.1, time_frac=0.5) == pytest.approx(0.55)
    assert lr_at(20, 1.0, 10, 1000, 0.1, time_frac=0.0) == lr_at(20, 1.0, 10, 1000, 0.1)


@pytest.mark.parametrize("mixer", ["attention", "gru"])
def test_tiny_model_loss_drops(tiny_data_dir: Path, tmp_path: Path, mixer: str) -> None:
    extra = ["model.mixer=gru", "model.pos=none"] if mixer == "gru" else []
    cfg = apply_overrides(get_preset("tiny"), TINY + extra + ["train.max_steps=40", "train.eval_every=40"])
    trainer = Trainer(tiny_data_dir, tmp_path / "run", cfg, progress=False)
    before = trainer.evaluate()["val_loss"]
    summary = trainer.run()
    after = trainer.evaluate()["val_loss"]
    assert summary["steps"] == trainer.progress.step == 40
    assert after < before - 0.5, (before, after)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert {"step", "train_loss", "lr", "tokens_per_s", "elapsed", "mfu"} <= set(lines[0])
    assert any("val_bpb" in x for x in lines)
    for name in ("config.json", "tokenizer.json", "model.safetensors", "trainer_state.pt", "run.json"):
        assert (tmp_path / "run" / name).exists(), name


@pytest.mark.parametrize("extra", [["model.mixer=gru", "model.pos=none"],
                                   ["model.mixer=gru", "model.pos=none", "model.context=init_state",
                                    "model.ctx_block_size=64"]], ids=["gru", "init_state"])
def test_validation_is_nats_per_target_token_and_bits_per_byte(tiny_data_dir: Path, tmp_path: Path,
                                                                extra: list[str]) -> None:
    """The trainer's val_loss / val_bpb against a per-target computation by hand on its fixed emails, each
    read whole in one call from its first token (with its context): the state a recurrent model has there.
    Side-by-side windows started fresh mid-email (the old validation) fail this."""
    from seqlab.models.context_encoder import ContextBatch

    cfg = apply_overrides(get_preset("tiny"), [*TINY, *extra])
    trainer = Trainer(tiny_data_dir, tmp_path / "run", cfg, progress=False)
    got = trainer.evaluate()
    store, tok, nll, targets, nbytes = trainer.validator.store, trainer.tok, 0.0, 0, 0
    assert (store.lengths[trainer.validator.emails] - 1 > cfg.model.block_size).any()  # emails longer than a window
    with torch.no_grad():
        for i in trainer.validator.emails.tolist():
            ids = torch.from_numpy(store.tokens[store.starts[i]:store.ends[i]].astype("int64"))[None]  # (1, L)
            ctx = ({"context": ContextBatch.from_lists([store.contexts.context(i, 64).tolist()])}
                   if cfg.model.reads_context else {})
            logp = torch.log_softmax(trainer.model.eval()(ids[:, :-1], **ctx)[0].double(), dim=-1)[0]  # (L-1, V)
            for t, target in enumerate(ids[0, 1:].tolist()):
                nll -= float(logp[t, target])
                targets += 1
                nbytes += 1 if target == tok.eos_id else len(tok.token_bytes(target))
    assert targets >= cfg.train.eval_batches * cfg.train.batch_size * cfg.model.block_size and nbytes >= targets
    assert got["val_loss"] == pytest.approx(nll / targets, rel=1e-5)
    assert got["val_bpb"] == pytest.approx(nll / math.log(2) / nbytes, rel=1e-5)
    assert got["val_ppl"] == pytest.approx(math.exp(nll / targets), rel=1e-5)


def _weights(run: Path) -> dict[str, bytes]:
    """Every saved tensor's raw bytes by name (the file header's metadata order is not fixed by safetensors)."""
    from safetensors.torch import load_file

    return {k: v.numpy().tobytes() for k, v in load_file(run / "model.safetensors").items()}


def _assert_same_weights(run: Path, ref: Path) -> None:
    a, b = _weights(run), _weights(ref)
    assert a.keys() == b.keys()
    differ = [k for k in a if a[k] != b[k]]
    assert not differ, f"tensors differ after resume: {differ}"


def _train_args(data: Path, run: Path, mixer: str, steps: int) -> list[str]:
    extra = ["model.mixer=gru", "model.pos=none"] if mixer == "gru" else []
    return _cli("train", str(data), "--out", str(run), "--preset", "tiny", "--quiet", *TINY, *extra,
                "model.dropout=0.1", f"train.max_steps={steps}", "train.ckpt_every=3", "train.eval_every=7")


@pytest.mark.parametrize("mixer", ["attention", "gru"])
def test_sigkill_then_resume_is_bitwise_exact(tiny_data_dir: Path, tmp_path: Path, mixer: str) -> None:
    steps = 150
    ref, run = tmp_path / "ref", tmp_path / "killed"
    subprocess.run(_train_args(tiny_data_dir, ref, mixer, steps), check=True, env=_env(), capture_output=True)
    proc = subprocess.Popen(_train_args(tiny_data_dir, run, mixer, steps), env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list(run.glob("checkpoints/step_*/manifest.json")) and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    done = json.loads((run / "manifest.json").read_text())["step"] if (run / "manifest.json").exists() else None
    assert done is None or done < steps, "the run finished before it could be killed"
    r = subprocess.run(_cli("train", str(tiny_data_dir), "--out", str(run), "--resume", "--quiet"),
                       env=_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    _assert_same_weights(run, ref)


def test_corrupt_latest_checkpoint_falls_back_and_still_matches(tiny_data_dir: Path, tmp_path: Path) -> None:
    ref, run = tmp_path / "ref", tmp_path / "run"
    subprocess.run(_train_args(tiny_data_dir, ref, "attention", 12), check=True, env=_env(), capture_output=True)
    shutil.copytree(ref, run)
    # damage every copy of the newest checkpoint (step 12): the previous one must be used, loudly, and
    # training from it must reproduce the same final weights
    steps = sorted(run.glob("checkpoints/step_*"))
    assert steps[-1].name == "step_000012" and len(steps) >= 2
    previous = int(steps[-2].name.split("_")[1])
    for d in [steps[-1], run]:
        blob = bytearray((d / "model.safetensors").read_bytes())
        blob[-1] ^= 0xFF
        (d / "model.safetensors").write_bytes(bytes(blob))
    shutil.rmtree(run / "best")
    r = subprocess.run(_cli("train", str(tiny_data_dir), "--out", str(run), "--resume", "--quiet"),
                       env=_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "step_000012" in r.stderr and f"resumed {run} at step {previous}" in r.stdout
    assert "seqlab: warning: skipping checkpoint" in r.stderr and "CheckpointWarning" not in r.stderr
    _assert_same_weights(run, ref)


def test_sigterm_finishes_the_step_and_saves(tiny_data_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = subprocess.Popen(_train_args(tiny_data_dir, run, "attention", 100000), env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (run / "metrics.jsonl").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "stopped by SIGTERM" in out
    state = torch.load(run / "trainer_state.pt", weights_only=True)
    assert 0 < state["step"] < 100000


def test_fresh_run_into_existing_run_dir_is_refused(tiny_run_dir: Path, tiny_data_dir: Path) -> None:
    r = subprocess.run(_cli("train", str(tiny_data_dir), "--out", str(tiny_run_dir), "--preset", "tiny"),
                       env=_env(), capture_output=True, text=True)
    assert r.returncode == 2 and "--resume" in r.stderr and "Traceback" not in r.stderr


def test_bad_override_is_a_user_error(tiny_data_dir: Path, tmp_path: Path) -> None:
    r = subprocess.run(_cli("train", str(tiny_data_dir), "--out", str(tmp_path / "r"), "model.mixer=lstm"),
                       env=_env(), capture_output=True, text=True)
    assert r.returncode == 2 and "model.mixer" in r.stderr and "Traceback" not in r.stderr
