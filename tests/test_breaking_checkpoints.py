"""Breaking checkpoint writes on purpose: SIGKILL at every write point of a checkpoint, and a full disk.

Kill points are deterministic: `SEQLAB_TEST_KILL_AT` (seqlab/fault_injection.py) makes a `python -m seqlab
train` subprocess SIGKILL itself at a named point: before, halfway through and after each file of a step
directory, of the mirror (RUN_DIR itself) and of `best/`, between the two renames of the `best/` swap,
while pruning an old step directory, and halfway through a metrics.jsonl line. Every run is tiny (6 steps,
a checkpoint every 2, validation every 2) and the second checkpoint (step 4) is the one killed, so a
complete checkpoint (step 2) always exists. After the kill the previous checkpoint must still verify, no
manifest may vouch for a partial file, and `seqlab train --resume` must end with weights, best/ and
metrics bitwise equal to a run that was never killed.

A full disk is simulated in-process by patching `os.write` (tests/disk_faults.py), which every durable
write of seqlab goes through: the chosen write of the chosen file comes out short, and from then on every
write to the run folder fails with ENOSPC, as on a disk that filled up. The command must exit 2 with one
sentence naming the file and "no space left", leave the previous checkpoint intact, and resume exactly
once space is back.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from disk_faults import HAS_PROC_FD, FullDisk
from safetensors.torch import load_file

from seqlab.cli.main import main as cli_main
from seqlab.runs.checkpoint import load_best, load_checkpoint, load_latest

STEPS = 6
TRAIN = ["--preset", "tiny", "--quiet", "train.threads=1", "train.log_every=1", "model.dropout=0.1",
         f"train.max_steps={STEPS}", "train.ckpt_every=2", "train.eval_every=2"]
FILES = ("model.safetensors", "trainer_state.pt", "config.json", "tokenizer.json", "manifest.json")
TIMING = ("tokens_per_s", "elapsed", "mfu")  # wall-clock fields of metrics.jsonl: the only ones allowed to differ


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0", **extra}


def _train_cmd(data: Path, run: Path) -> list[str]:
    return [sys.executable, "-m", "seqlab", "train", str(data), "--out", str(run), *TRAIN]


@pytest.fixture(scope="module")
def reference(tiny_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run that was never killed."""
    ref = tmp_path_factory.mktemp("reference") / "run"
    subprocess.run(_train_cmd(tiny_data_dir, ref), check=True, env=_env(), capture_output=True)
    return ref


def _tensors(path: Path) -> dict[str, bytes]:
    return {k: v.numpy().tobytes() for k, v in load_file(path).items()}


def _metrics(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in lines]


def assert_same_run(run: Path, ref: Path) -> None:
    """Weights of the mirror and of best/, and the metrics log (timing aside), equal the reference's."""
    for rel in ("model.safetensors", "best/model.safetensors"):
        assert _tensors(run / rel) == _tensors(ref / rel), f"{rel} differs from the run never interrupted"
    assert _metrics(run) == _metrics(ref)


def assert_consistent(run: Path) -> None:
    """Every manifest in the run vouches only for complete files, no temporary or swap folder is left."""
    for manifest in run.rglob("manifest.json"):
        load_checkpoint(manifest.parent)  # UserError naming the file if a manifest vouches for a bad one
    leftovers = [p for p in run.rglob("*") if p.name.endswith(".tmp") or p.name in ("best.new", "best.old")]
    assert not leftovers, leftovers


def _resume(data: Path, run: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """`seqlab train --resume` in this process (the killed run was a subprocess); returns its stderr."""
    capsys.readouterr()
    assert cli_main(["train", str(data), "--out", str(run), "--resume", "--quiet"]) == 0
    return capsys.readouterr().err


# (SEQLAB_TEST_KILL_AT, the step of the newest checkpoint that must still verify after the kill)
KILLS = [
    # the step directory of the second checkpoint: before, halfway through and after each file
    *[(f"step_000004/{name}:{phase}", 2) for name in FILES for phase in ("before", "during", "after")],
    # the mirror, RUN_DIR itself (its second update, at step 4); "uncommitted": its old manifest just removed
    ("run:uncommitted", 4),
    *[(f"run/{name}:{phase}#2", 4) for name in ("model.safetensors", "manifest.json")
      for phase in ("before", "during", "after")],
    ("run/trainer_state.pt:during#2", 4),
    # best/: written as best.new/, then best -> best.old and best.new -> best, then best.old removed
    ("best.new/model.safetensors:during#2", 4),
    ("best.new/manifest.json:after#2", 4),
    ("run/best:old-moved", 4),
    ("run/best:new-moved#2", 4),
    # the third checkpoint removes step 2, manifest first
    ("checkpoints/step_000002:removing", 6),
    # half of a metrics line (not a checkpoint file, but a kill can land there just as well)
    ("run/metrics.jsonl:during#3", 2),
]


@pytest.mark.parametrize(("point", "kept"), KILLS, ids=[k for k, _ in KILLS])
def test_sigkill_at_a_write_point_then_resume_is_exact(point: str, kept: int, tiny_data_dir: Path, reference: Path,
                                                       tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Old behaviour (checked with these kill points added to the old code): at every "during" point of the
    step directory and the mirror the killed write's `.NAME.XXXX.tmp` stayed in the run folder for good
    (nothing ever removed it: a model-sized leak per kill), and a metrics line torn by the kill made
    `--resume` crash with a JSONDecodeError traceback. The other points already resumed exactly; they
    guard the write order. Now the next write of a directory removes the temporaries, a torn line is
    dropped, and every point resumes to the run never killed."""
    run = tmp_path / "run"
    proc = subprocess.run(_train_cmd(tiny_data_dir, run), env=_env(SEQLAB_TEST_KILL_AT=point), capture_output=True,
                          text=True)
    assert proc.returncode == -signal.SIGKILL, f"never reached {point}: {proc.stderr[-2000:]}"
    # the checkpoint before the one being written is intact, and no manifest vouches for a partial file
    for manifest in run.rglob("manifest.json"):
        load_checkpoint(manifest.parent)
    assert load_checkpoint(run / "checkpoints" / f"step_{kept:06d}").step == kept
    latest, best = load_latest(run), load_best(run)
    assert latest is not None and latest.step >= kept and best is not None
    capsys.readouterr()
    _resume(tiny_data_dir, run, capsys)
    assert_same_run(run, reference)
    assert_consistent(run)


def test_kill_points_cost_nothing_when_unset() -> None:
    """The hook is read once at import and, unset, each write point is a single `is None` test."""
    from seqlab import fault_injection

    assert os.environ.get(fault_injection.TEST_KILL_ENV) is None and fault_injection._KILL_AT is None
    fault_injection.kill_point("anything:at-all")  # returns at once: no kill, no counting
    assert fault_injection._kill_matches == 0


# ------------------------------------------------------------------------------------------- a full disk


# (what fills the disk: a path pattern, which matching os.write call, the file the error must name,
#  the step of the newest checkpoint that must still verify)
DISK_FULL = [
    ("*/run/checkpoints/step_000004/.model.safetensors.*.tmp", 1, "checkpoints/step_000004/model.safetensors", 2),
    ("*/run/checkpoints/step_000004/.manifest.json.*.tmp", 1, "checkpoints/step_000004/manifest.json", 2),
    ("*/run/.trainer_state.pt.*.tmp", 3, "trainer_state.pt", 4),  # the mirror's second update
    ("*/run/best.new/.model.safetensors.*.tmp", 3, "best.new/model.safetensors", 4),
    ("*/run/metrics.jsonl", 5, "metrics.jsonl", 2),  # the third line (each append is written in two halves)
    ("*/run/.run.json.*.tmp", 1, "run.json", None),  # before the first step
]


@pytest.mark.skipif(not HAS_PROC_FD, reason="finds the file of a descriptor through /proc")
@pytest.mark.parametrize(("pattern", "nth", "named", "kept"), DISK_FULL, ids=[d[2] for d in DISK_FULL])
def test_disk_full_while_training_is_one_sentence_and_keeps_the_last_checkpoint(
        pattern: str, nth: int, named: str, kept: int | None, tiny_data_dir: Path, reference: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Old behaviour (checked on the old code with a failing write): ENOSPC escaped as a traceback,
    `OSError: [Errno 28] No space left on device` naming no file (exit 1), and a metrics line cut short by
    the full disk stayed in the log, half a JSON object that made the next `--resume` crash with a
    JSONDecodeError. Now: exit 2, one sentence naming the file and "no space left", the log cut back to
    whole lines, the last checkpoint intact, and once space is back `--resume` ends equal to the run that
    never ran out."""
    run = tmp_path / "run"
    disk = FullDisk(tmp_path, pattern, nth)
    monkeypatch.setattr(os, "write", disk)
    code = cli_main(["train", str(tiny_data_dir), "--out", str(run), *TRAIN])
    monkeypatch.undo()
    err = capsys.readouterr().err.strip().splitlines()
    assert disk.full, f"the disk never filled: no write matched {pattern}"
    assert code == 2 and err[-1] == (f"seqlab: error: cannot write {run / named}: no space left on the device; "
                                     "free some space and run the command again"), err
    if (run / "metrics.jsonl").exists():
        for line in (run / "metrics.jsonl").read_text().splitlines():
            json.loads(line)  # whole lines only: a failed append was cut back
    for manifest in run.rglob("manifest.json"):
        load_checkpoint(manifest.parent)  # nothing half-written is vouched for
    assert not [p for p in run.rglob("*.tmp")]
    if kept is None:  # full before the first checkpoint: nothing to resume, a fresh start is allowed
        assert load_latest(run) is None
        assert cli_main(["train", str(tiny_data_dir), "--out", str(run), *TRAIN]) == 0
    else:
        assert load_checkpoint(run / "checkpoints" / f"step_{kept:06d}").step == kept
        _resume(tiny_data_dir, run, capsys)
    assert_same_run(run, reference)
    assert_consistent(run)
