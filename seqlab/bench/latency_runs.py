"""The latency benchmark's material: its settings, the two trained runs and the text that is typed.

Two models of the `small` preset, a GRU (model.mixer=gru model.pos=none) and attention (the preset's RoPE),
each trained briefly on the offline synthetic corpus (a random-weight model never ends a word, so its
decoding would always run to the token budget). Data and runs are cached under the benchmark's --cache
and reused when present. The text is email bodies from the corpus's test split (the bodies of
consecutive test emails joined by a blank line until long enough), cut to C bytes of context.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

CONTEXTS = (64, 256, 1024, 2048)
KEPT_P90_MS = 15.0
SPEEDUP_AT = 1024
SPEEDUP_GOAL = 5.0
OVERHEAD_P50_MS = 2.0
LEARNING_P90_RATIO = 1.5  # keystroke p90 while the server learns, over the same keystrokes without it
GATE_US = 100.0  # the access gate's share of that: 5%
MAX_WORDS = 3
MODELS = {"gru": ["model.mixer=gru", "model.pos=none"], "attention": []}  # attention: the preset's RoPE


def _seqlab(*args: str) -> None:
    """Run `python -m seqlab ARGS` in a child process; stop the benchmark if it fails."""
    cmd = [sys.executable, "-m", "seqlab", *args]
    print("  $ " + " ".join(cmd[1:]), flush=True)
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise SystemExit(f"`seqlab {args[0]}` failed (exit {done.returncode}):\n{done.stdout[-3000:]}")
    last = done.stdout.strip().splitlines()[-1:] or [""]
    print(f"    {last[0]}", flush=True)


def ensure_data(cache: Path, count: int = 2000) -> Path:
    """cache/data: the offline synthetic corpus (`count` emails) prepared on first use, reused afterwards."""
    cache.mkdir(parents=True, exist_ok=True)
    data = cache / "data"
    if not (data / "meta.json").is_file():
        shutil.rmtree(data, ignore_errors=True)
        _seqlab("prepare", "synthetic", "--out", str(data), "--count", str(count), "--quiet")
    return data


def ensure_runs(cache: Path, quick: bool) -> tuple[Path, dict[str, Path]]:
    """(DATA_DIR, {model name: RUN_DIR}), prepared and trained on first use, reused afterwards.

    A run is trained into NAME.tmp and renamed when `seqlab train` has finished, so an interrupted
    training is started again instead of being measured."""
    data = ensure_data(cache)
    if quick:
        preset, budget = "tiny", ["train.max_steps=200", "train.eval_every=100"]
    else:
        preset, budget = "small", ["train.max_minutes=2"]
    runs = {}
    for name, overrides in MODELS.items():
        run = cache / f"{name}-{preset}"
        if not (run / "manifest.json").is_file():
            tmp = cache / f"{run.name}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            _seqlab("train", str(data), "--out", str(tmp), "--preset", preset, "--quiet", *overrides, *budget)
            shutil.rmtree(run, ignore_errors=True)
            tmp.rename(run)
        runs[name] = run
    return data, runs


def test_text(data: Path, min_chars: int) -> tuple[str, str]:
    """(subject, body): the first test email's subject and the bodies of test emails joined by a blank line."""
    from seqlab.data.store import TokenStore
    from seqlab.data.tokenizer import load_tokenizer

    tok = load_tokenizer(data / "tokenizer.json")
    store = TokenStore(data, "test")
    subject, bodies, size = "", [], 0
    for i in range(store.num_emails):
        text = tok.decode([t for t in store.email(i).tolist() if not tok.is_special(t)])
        head, _, body = text.partition("\n\n")
        subject = subject or head
        bodies.append(body.strip())
        size += len(body) + 2
        if size >= min_chars:
            break
    body = "\n\n".join(bodies)
    if len(body) < min_chars:
        raise SystemExit(f"the test split of {data} holds {len(body)} characters of body, fewer than {min_chars}")
    return subject, body


def val_emails(data: Path, n: int) -> list[tuple[str, str]]:
    """(subject, body) of the first n validation emails: the "sent" mail a learning server is given."""
    from seqlab.data.store import TokenStore
    from seqlab.data.tokenizer import load_tokenizer

    tok = load_tokenizer(data / "tokenizer.json")
    store = TokenStore(data, "val")
    out = []
    for i in range(min(n, store.num_emails)):
        text = tok.decode([t for t in store.email(i).tolist() if not tok.is_special(t)])
        subject, _, body = text.partition("\n\n")
        if body.strip():
            out.append((subject, body.strip()))
    return out


def cut_bytes(text: str, n: int) -> int:
    """Characters of `text` in its first n UTF-8 bytes (a character cut in two is left out)."""
    return len(text.encode("utf-8")[:n].decode("utf-8", errors="ignore"))
