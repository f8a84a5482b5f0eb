"""A bounded coverage-guided fuzzing run of the mail reader: tests/fuzz_mail.py under atheris (libFuzzer).

Run in a subprocess with a fixed mutation seed and a fixed number of executions, on the seed inputs and the
regression corpus. A subprocess, because atheris must instrument the reader's modules as they are first
imported (this process has imported them already), `atheris.Fuzz()` ends by exiting the process, and a
crash must fail this test rather than take a pytest worker down with it. libFuzzer writes a failing input
to the artifact folder; the failure message shows it and says where it goes. `make fuzz` is the long run.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mail_fuzzing import REGRESSION_DIR, write_seeds

FUZZER = Path(__file__).resolve().parent / "fuzz_mail.py"
RUNS = 3000  # executions, seeds included: about 20 CPU seconds here
MAX_SECONDS = 60  # libFuzzer stops earlier on a slow machine; MIN_RUNS still has to be reached
MIN_RUNS = 300  # the seeds alone are ~120 executions: the run went well past them


def test_bounded_atheris_run_finds_nothing(tmp_path: Path) -> None:
    pytest.importorskip("atheris", reason="atheris (a dev extra) has no wheel for this platform")
    seeds, corpus, artifacts = tmp_path / "seeds", tmp_path / "corpus", tmp_path / "artifacts"
    n_seeds = write_seeds(seeds)
    corpus.mkdir()
    artifacts.mkdir()
    cmd = [sys.executable, str(FUZZER), f"-runs={RUNS}", "-seed=1", f"-max_total_time={MAX_SECONDS}",
           "-timeout=30", "-max_len=16384", "-print_final_stats=1", f"-artifact_prefix={artifacts}/",
           str(corpus), str(seeds), str(REGRESSION_DIR)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=MAX_SECONDS + 120, env=env)
    log = proc.stdout + proc.stderr
    found = sorted(p for p in artifacts.iterdir() if not p.name.startswith("unconfirmed-"))
    if proc.returncode != 0 or found:
        shown = "\n".join(f"{p.name}: {base64.b64encode(p.read_bytes()[:2000]).decode()}" for p in found)
        pytest.fail(f"atheris found a failing input (exit {proc.returncode}); copy it into {REGRESSION_DIR} under "
                    f"a name saying what it found, then fix the reader.\n{shown}\n{log[-4000:]}")
    done = re.search(r"Done (\d+) runs", log)
    assert done, log[-2000:]
    runs = int(done.group(1))
    assert runs >= MIN_RUNS and runs > n_seeds, log[-2000:]
    print(f"atheris: {runs} executions of the mail target")
