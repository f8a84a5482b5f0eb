"""Shared tiny fixtures: a prepared synthetic DATA_DIR and a briefly trained run, built once per session.

Everything here is seeded and small so the whole suite stays within minutes on 2 CPU cores.
"""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

import pytest

# Reproducible CPU numerics for every test process (resume-exactness tests also pin threads per run).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The Ctrl-C tests send SIGINT to child processes, which must start with SIGINT at its default. A shell that
# runs the suite in the background without job control starts it with SIGINT ignored, and an ignored signal
# survives exec: every child would then ignore Ctrl-C. A handler does not survive exec, so install one here.
signal.signal(signal.SIGINT, signal.default_int_handler)
# The server keeps paired browser extensions in the person's config folder: never the real one in a test.
os.environ["SEQLAB_CONFIG_DIR"] = tempfile.mkdtemp(prefix="seqlab-config-")
# ... and its caches (the speed probe's rates, downloaded corpora) in a folder of this run, never the person's.
os.environ["SEQLAB_CACHE"] = tempfile.mkdtemp(prefix="seqlab-cache-")


@pytest.fixture(scope="session")
def tiny_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DATA_DIR prepared from 160 synthetic emails with the byte tokenizer."""
    from preparing import prepare

    out = tmp_path_factory.mktemp("data") / "synthetic"
    prepare("synthetic", out, count=160, seed=0, split=(0.8, 0.1, 0.1), progress=False)
    return out


@pytest.fixture(scope="session")
def tiny_run_dir(tiny_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny attention model trained for a few steps on `tiny_data_dir`."""
    from seqlab.config import apply_overrides, get_preset
    from seqlab.training.trainer import train

    run = tmp_path_factory.mktemp("runs") / "attn"
    cfg = apply_overrides(get_preset("tiny"), ["train.max_steps=20", "train.threads=1"])
    train(tiny_data_dir, run, cfg, progress=False)
    return run


@pytest.fixture(scope="session")
def gru_run_dir(tiny_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny GRU trained for 5 steps (no positions)."""
    from seqlab.config import apply_overrides, get_preset
    from seqlab.training.trainer import train

    run = tmp_path_factory.mktemp("runs") / "gru"
    cfg = apply_overrides(get_preset("tiny"), ["model.mixer=gru", "model.pos=none", "train.max_steps=5",
                                               "train.threads=1"])
    train(tiny_data_dir, run, cfg, progress=False)
    return run


@pytest.fixture(scope="session")
def word_run_dir(tiny_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny attention model trained for 300 steps (a few seconds): enough to propose words at most
    word boundaries. The 20-step `tiny_run_dir` still proposes only whitespace, so completion checks on it
    would hold trivially."""
    from seqlab.config import apply_overrides, get_preset
    from seqlab.training.trainer import train

    run = tmp_path_factory.mktemp("runs") / "attn300"
    cfg = apply_overrides(get_preset("tiny"), ["train.max_steps=300", "train.threads=1"])
    train(tiny_data_dir, run, cfg, progress=False)
    return run


@pytest.fixture(scope="session")
def browser_run_dir(tiny_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run the browser tests serve: a tiny GRU trained for 200 steps (about 2 s); fewer steps leave it
    suggesting nothing at all. Skips (or fails, in CI) without chromium, before training.

    SEQLAB_BROWSER_RUN=RUN_DIR serves that run instead: a real model makes a better screenshot.
    """
    from serving_helpers import require_browser

    require_browser()
    if os.environ.get("SEQLAB_BROWSER_RUN"):
        return Path(os.environ["SEQLAB_BROWSER_RUN"])
    from seqlab.config import apply_overrides, get_preset
    from seqlab.training.trainer import train

    run = tmp_path_factory.mktemp("runs") / "browser-gru"
    cfg = apply_overrides(get_preset("tiny"), [
        "model.mixer=gru", "model.pos=none", "train.max_steps=200", "train.eval_every=100",
        "train.ckpt_every=100", "train.threads=1",
    ])
    train(tiny_data_dir, run, cfg, progress=False)
    return run
