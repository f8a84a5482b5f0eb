"""What the IMAP source parses from a hostile server: the fuzz target (tests/imap_fuzzing.py) on every input fuzzing
found (tests/fuzz_corpus/imap/) and on the seed conversations, then a short atheris run in a subprocess (as
tests/test_fuzz_mail_atheris.py does for the mail reader). `make fuzz` is the long run."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from imap_fuzzing import REGRESSION_DIR, SECRET, _in_memory, regression_files, run_input, seed_inputs, write_seeds

from seqlab.data.mail.imap import ImapSource
from seqlab.data.mail.imap_auth import ENV_PASSWORD, ImapOptions
from seqlab.errors import UserError

FUZZER = Path(__file__).resolve().parent / "fuzz_imap.py"
RUNS = 5000  # a few seconds: the target reads a conversation in about a millisecond instrumented
MAX_SECONDS = 60


@pytest.mark.parametrize("path", regression_files(), ids=lambda p: p.name)
def test_every_input_fuzzing_found_stays_fixed(path: Path) -> None:
    run_input(path.read_bytes())


@pytest.mark.parametrize("name", sorted(seed_inputs()))
def test_seed_conversations_pass(name: str) -> None:
    run_input(seed_inputs()[name])


def test_the_good_conversation_reads_its_mail(monkeypatch: pytest.MonkeyPatch) -> None:
    # The target must reach the mail: a seed that stopped at the login would fuzz nothing past it.
    monkeypatch.setenv(ENV_PASSWORD, SECRET)
    with _in_memory(seed_inputs()["good"][1:]):
        source = ImapSource("imap://fuzz@127.0.0.1:1143/INBOX", ImapOptions(insecure=True))
        got = list(source)
    assert [raw for _, raw in got] == [b"From: a@b.c\nSubject: hi\n\nhello there\n",
                                      b"From: a@b.c\nSubject: hi\n\nagain there\n", "too_large"]
    assert source.state() == {"folders": {"INBOX": {"uidvalidity": 7, "last_uid": 3}}}


def test_a_uid_beyond_32_bits_is_a_malformed_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_PASSWORD, SECRET)
    with _in_memory((REGRESSION_DIR / "uid-beyond-64-bits").read_bytes()[1:]):
        source = ImapSource("imap://fuzz@127.0.0.1:1143/INBOX", ImapOptions(insecure=True))
        with pytest.raises(UserError, match="malformed reply about 'INBOX'"):
            list(source)


def test_bounded_atheris_run_finds_nothing(tmp_path: Path) -> None:
    pytest.importorskip("atheris", reason="atheris (a dev extra) has no wheel for this platform")
    seeds, corpus, artifacts = tmp_path / "seeds", tmp_path / "corpus", tmp_path / "artifacts"
    write_seeds(seeds)
    corpus.mkdir()
    artifacts.mkdir()
    cmd = [sys.executable, str(FUZZER), f"-runs={RUNS}", "-seed=1", f"-max_total_time={MAX_SECONDS}", "-timeout=30",
           "-max_len=4096", "-print_final_stats=1", f"-artifact_prefix={artifacts}/", str(corpus), str(seeds),
           str(REGRESSION_DIR)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=MAX_SECONDS + 120,
                          env={**os.environ, "PYTHONHASHSEED": "0"})
    log = proc.stdout + proc.stderr
    found = sorted(artifacts.iterdir())
    if proc.returncode != 0 or found:
        shown = "\n".join(f"{p.name}: {base64.b64encode(p.read_bytes()[:2000]).decode()}" for p in found)
        pytest.fail(f"atheris found a failing input (exit {proc.returncode}); copy it into {REGRESSION_DIR} under "
                    f"a name saying what it found, then fix the IMAP source.\n{shown}\n{log[-4000:]}")
    done = re.search(r"Done (\d+) runs", log)
    assert done and int(done.group(1)) > len(seed_inputs()), log[-2000:]
