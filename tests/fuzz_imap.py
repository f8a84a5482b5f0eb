"""Coverage-guided fuzzing of what the IMAP source parses from a server, with atheris (libFuzzer). A program.

    python tests/fuzz_imap.py [libFuzzer flags] CORPUS_DIR [MORE_CORPUS_DIRS ...]
    python tests/fuzz_imap.py --write-seeds DIR     # the seed conversations (tests/imap_fuzzing.py) into DIR

The target is `imap_fuzzing.run_input` (its docstring gives the input format and what counts as a failure).
`make fuzz` runs it after the mail reader's target. A failing input lands as `crash-<sha1>` under
-artifact_prefix: copy it into tests/fuzz_corpus/imap/ with a name saying what it found, fix the source, and
the replay test (tests/test_fuzz_imap.py) keeps it fixed. The IMAP source's modules and the standard library's
`imaplib` are instrumented for coverage; they are imported here, before anything else loads them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the tests' helper modules

with atheris.instrument_imports(include=["seqlab.data.mail.imap", "seqlab.data.mail.imap_auth",
                                         "seqlab.data.mail.imap_replies", "seqlab.data.mail.imap_url", "imaplib"]):
    import imap_fuzzing


def main(argv: list[str]) -> None:
    if len(argv) == 3 and argv[1] == "--write-seeds":
        print(f"wrote {imap_fuzzing.write_seeds(Path(argv[2]))} seed inputs to {argv[2]}")
        return
    # libFuzzer runs argv[0] again for -merge=1 and -fork=N (through the shell): this script is no
    # executable, so that is the interpreter and the script
    argv = [f"{sys.executable} {Path(__file__).resolve()}", *argv[1:]]
    atheris.Setup(argv, imap_fuzzing.run_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
