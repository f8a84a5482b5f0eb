"""Data-parallel training under torchrun (seqlab/training/distributed.py): two processes compute what one does.

The runs are spawned with torchrun itself (`python -m torch.distributed.run --nproc_per_node=2`, gloo on
the CPU, a c10d rendezvous on a free port so parallel tests do not collide), tiny preset, 12 steps with
two accumulated micro-batches each (so `no_sync` is on the path), validation and a checkpoint every 4.

- 1 vs 2 processes, same global batch, for a GRU (`seqlab train` under torchrun) and for attention with
  a NaN loss on rank 1 alone at one step (tests/ddp_bad_step.py, which both ranks must skip, as one
  process skips it): the final weights agree to ATOL. Why that tolerance: the two
  processes compute the same per-row losses, but the gradient of the batch is summed in another order
  (each rank sums its half of the rows, then gloo averages the halves; the loss is a per-rank sum scaled
  by world / n instead of one mean), so each step's gradient differs by float32 rounding, ~1e-7
  relative. AdamW turns a relative gradient error e into an update error of about lr * e, so 12 steps at
  lr 3e-3 move weights of size ~1 apart by far less than 1e-6 (measured: 1.2e-7, one float32 ulp at 1).
  ATOL = 1e-5 leaves room for other BLAS kernels and is still 100 times smaller than what one training
  step changes (checked: the run moved the weights by more than 1e-2). The validation figures agree too,
  and so does the count of tokens read: the ranks read disjoint halves of each batch, not all of it twice.
- A 2-process run SIGKILLed while rank 0 writes its second checkpoint and resumed under torchrun ends with
  weights and metrics bitwise equal to the 2-process run never killed (every rank's RNG and carried GRU
  stream state come back from the one checkpoint), and resuming it on one process is a UserError.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from ddp_bad_step import train_with_bad_rows
from safetensors.torch import load_file
from token_stores import LENGTHS, T, coded_store

from seqlab.config import RunConfig, apply_overrides, get_preset
from seqlab.data.batches import WindowSampler, shard_rows
from seqlab.data.streams import StreamSampler
from seqlab.errors import UserError
from seqlab.runs.checkpoint_files import load_trainer_state
from seqlab.training.distributed import World
from seqlab.training.trainer import Trainer, train

ATOL = 1e-5  # see the module doc
TRAIN = ["train.threads=1", "train.max_steps=12", "train.grad_accum=2", "train.log_every=1", "train.eval_every=4",
         "train.ckpt_every=4"]
GRU = ["model.mixer=gru", "model.pos=none"]
TIMING = ("tokens_per_s", "elapsed", "mfu")  # wall-clock fields: the only ones allowed to differ


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(data: Path, run: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`seqlab train` on 2 processes, launched by torchrun as a user would."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{_free_port()}", "-m", "seqlab", "train", str(data), "--out", str(run),
           "--quiet", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0", **env})


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(run / "model.safetensors")


def _metrics(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in lines]


def _two_process_run(data: Path, run: Path, overrides: list[str]) -> Path:
    proc = torchrun(data, run, "--preset", "tiny", *TRAIN, *overrides)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run


@pytest.fixture(scope="module")
def gru_two(tiny_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 2-process GRU run never killed: compared with one process and with a killed, resumed run."""
    return _two_process_run(tiny_data_dir, tmp_path_factory.mktemp("ddp") / "gru2", GRU)


# ------------------------------------------------------------------------------- sharding, in-process


def test_shards_laid_end_to_end_are_the_whole_batch(tmp_path: Path) -> None:
    store, pad = coded_store(tmp_path, LENGTHS)
    for sampler in (WindowSampler, StreamSampler):
        whole = sampler(store, T, 6, 3, pad)
        parts = [sampler(store, T, 6, 3, pad, shard=(r, 3)) for r in range(3)]
        for step in (0, 1, 7, 40):
            batch = whole.batch(step)
            shards = [p.batch(step) for p in parts]
            for i, full in enumerate(batch):
                assert torch.equal(torch.cat([s[i] for s in shards]), full)
    with pytest.raises(ValueError, match="does not divide"):
        shard_rows(6, (0, 4))


def test_a_global_batch_that_does_not_divide_is_refused() -> None:
    assert World(rank=1, size=4).shard(8) == (1, 4)
    with pytest.raises(UserError, match="must divide by the 4 processes"):
        World(rank=0, size=4).shard(6)


# ------------------------------------------------------------------------------- torchrun


def assert_same_training(one: Path, two: Path, init: dict[str, torch.Tensor]) -> None:
    """The 2-process run `two` ended where the 1-process run `one` did: weights within ATOL (module doc),
    validation within rounding, the same steps logged and skipped; every rank's state was saved."""
    w1, w2 = _weights(one), _weights(two)
    assert max(float((w1[k] - init[k]).abs().max()) for k in w1) > 1e-2  # training moved the weights
    diff = max(float((w1[k] - w2[k]).abs().max()) for k in w1)
    assert diff <= ATOL, f"1 vs 2 processes: max abs weight difference {diff}"
    m1, m2 = _metrics(one), _metrics(two)
    assert [sorted(m) for m in m1] == [sorted(m) for m in m2]  # the same records (steps, skips, evaluations)
    val1, val2 = ([m["val_loss"] for m in ms if "val_loss" in m] for ms in (m1, m2))
    assert len(val1) == 3 and np.allclose(val1, val2, rtol=0, atol=1e-4)
    assert json.loads((two / "run.json").read_text())["world_size"] == 2
    ranks = load_trainer_state(two / "trainer_state.pt")["ranks"]
    assert len(ranks) == 2 and not torch.equal(ranks[0]["rng"]["torch_cpu"], ranks[1]["rng"]["torch_cpu"])


def _initial_weights(data: Path, run: Path, cfg: RunConfig) -> dict[str, torch.Tensor]:
    fresh = Trainer(data, run, cfg, progress=False)
    fresh.lock.release()
    return fresh.model.state_dict()


def test_two_processes_train_a_gru_as_one_does(tiny_data_dir: Path, gru_two: Path, tmp_path: Path) -> None:
    """Recurrent: each rank carries the hidden state of its own lanes of the email stream."""
    cfg = apply_overrides(get_preset("tiny"), [*TRAIN, *GRU])
    one = train(tiny_data_dir, tmp_path / "one", cfg, progress=False)
    two = json.loads((gru_two / "run.json").read_text())["summary"]
    assert two["tokens"] == one["tokens"]  # the ranks read disjoint halves of each batch, not all of it twice
    assert_same_training(tmp_path / "one", gru_two, _initial_weights(tiny_data_dir, tmp_path / "init", cfg))


def test_a_bad_step_on_one_rank_is_skipped_by_all_as_by_one_process(tiny_data_dir: Path, tmp_path: Path) -> None:
    """Attention, and a NaN loss on rank 1 alone at step 5 (its rows, the batch's second half, alone):
    both ranks skip the step, as one process skips it, and the ranks' weights stay bitwise equal."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{_free_port()}", str(Path(__file__).with_name("ddp_bad_step.py")),
           str(tiny_data_dir), str(tmp_path / "two"), "5", *TRAIN]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"})
    assert proc.returncode == 0 and "ranks agree" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stderr.count("step 6 skipped: non-finite loss") == 1  # said once, by rank 0
    train_with_bad_rows(tiny_data_dir, tmp_path / "one", 5, TRAIN)
    assert [m["step"] for m in _metrics(tmp_path / "two") if "skipped" in m] == [6]
    cfg = apply_overrides(get_preset("tiny"), TRAIN)
    assert_same_training(tmp_path / "one", tmp_path / "two", _initial_weights(tiny_data_dir, tmp_path / "init", cfg))


def test_sigkill_under_torchrun_then_resume_is_exact(tiny_data_dir: Path, gru_two: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    killed = torchrun(tiny_data_dir, run, "--preset", "tiny", *TRAIN, *GRU,
                      SEQLAB_TEST_KILL_AT="step_000008/model.safetensors:during")
    assert killed.returncode != 0 and "SIGKILL" in killed.stderr, killed.stderr[-3000:]
    assert json.loads((run / "manifest.json").read_text())["step"] == 4  # the kill left step 4 the newest
    with pytest.raises(UserError, match="trained by 2 processes"):
        Trainer(tiny_data_dir, run, resume=True, progress=False)  # one process cannot take up two ranks' lanes
    resumed = torchrun(tiny_data_dir, run, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed" in resumed.stdout and resumed.stdout.count("reached train.max_steps") == 1  # rank 0 alone
    w, ref = _weights(run), _weights(gru_two)
    assert all(torch.equal(w[k], ref[k]) for k in ref), "the resumed 2-process run differs from the one never killed"
    assert _metrics(run) == _metrics(gru_two)
