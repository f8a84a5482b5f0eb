"""Coverage-guided fuzzing of the mail reader with atheris (libFuzzer). Not a test module: a program.

    python tests/fuzz_mail.py [libFuzzer flags] CORPUS_DIR [MORE_CORPUS_DIRS ...]
    python tests/fuzz_mail.py --write-seeds DIR     # the seed inputs (tests/mail_fuzzing.py) into DIR

The target is `mail_fuzzing.run_input` (its docstring gives the input format and what counts as a failure).
`make fuzz` runs this to 1M executions on a corpus under out/; `tests/test_fuzz_mail_atheris.py` runs it for
a fixed number of executions. libFuzzer writes a failing input as `crash-<sha1>` (or `timeout-<sha1>` for a
hang past -timeout) under -artifact_prefix; copy it into tests/fuzz_corpus/mail/ with a name saying what it
found, fix the reader, and the replay test keeps it fixed. The seqlab mail modules and the standard library's
`email` package are instrumented for coverage; the modules are imported here, before anything else loads them.

In a long fuzzing run, about one pumped input in a few thousand times at over 3x for twice the size even
with the garbage collector paused, yet linearly when replayed in a fresh process, instrumented or not. So a
"slow" or "superlinear" verdict is confirmed by replaying the input in a fresh, uninstrumented interpreter;
unconfirmed verdicts are counted, printed and kept as `unconfirmed-<sha1>` beside the artifacts, not reported.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import atheris

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))  # the tests' helper modules

with atheris.instrument_imports(include=["seqlab.data.mail", "email"]):
    import mail_fuzzing


_REPLAY = f"import sys; sys.path.insert(0, {str(TESTS)!r}); import mail_fuzzing; " \
          "mail_fuzzing.run_input(sys.stdin.buffer.read())"
unconfirmed = 0
UNCONFIRMED_PREFIX = ""  # libFuzzer's -artifact_prefix


def fails_uninstrumented(data: bytes) -> bool:
    proc = subprocess.run([sys.executable, "-c", _REPLAY], input=data, capture_output=True, timeout=600)
    return proc.returncode != 0


def target(data: bytes) -> None:
    global unconfirmed
    try:
        mail_fuzzing.run_input(data)
    except mail_fuzzing.FuzzFailure as failure:
        if failure.kind in ("slow", "superlinear") and not fails_uninstrumented(data):
            unconfirmed += 1
            print(f"#unconfirmed {unconfirmed}: not {failure.kind} without instrumentation ({failure})", flush=True)
            if UNCONFIRMED_PREFIX:  # kept for a look, never reported
                Path(f"{UNCONFIRMED_PREFIX}unconfirmed-{hashlib.sha1(data).hexdigest()}").write_bytes(data)
            return
        raise


def main(argv: list[str]) -> None:
    global UNCONFIRMED_PREFIX
    if len(argv) == 3 and argv[1] == "--write-seeds":
        print(f"wrote {mail_fuzzing.write_seeds(Path(argv[2]))} seed inputs to {argv[2]}")
        return
    UNCONFIRMED_PREFIX = next((a.split("=", 1)[1] for a in argv if a.startswith("-artifact_prefix=")), "")
    # libFuzzer runs argv[0] again for -merge=1 and -fork=N (through the shell): this script is no
    # executable, so that is the interpreter and the script
    argv = [f"{sys.executable} {Path(__file__).resolve()}", *argv[1:]]
    atheris.Setup(argv, target)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
