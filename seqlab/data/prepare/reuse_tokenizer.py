"""`prepare --tokenizer-from PATH`: encode a new DATA_DIR with a tokenizer already in use, instead of fitting one.

Token ids mean something only under the tokenizer they were made with, so a run can continue on (`train
--init RUN_DIR0`) or be evaluated on another mailbox only when that mailbox was encoded with the run's own
tokenizer. The byte tokenizer is the same everywhere; a BPE tokenizer is fitted per DATA_DIR, so adapting a
BPE run to one person needs their mail encoded with the general run's BPE merges. PATH is a RUN_DIR or a
DATA_DIR (their `tokenizer.json`) or a tokenizer.json file itself. The tokenizer is loaded as `load_tokenizer`
loads it (a damaged or foreign file is a UserError) and written unchanged, so the new DATA_DIR's sha256 in
meta.json is the source's and `train --init` accepts it; meta.json also records where it came from
(`tokenizer.from`).
"""

from __future__ import annotations

from pathlib import Path

from seqlab.data.tokenizer import Tokenizer, load_tokenizer
from seqlab.errors import UserError

TOKENIZER_FILE = "tokenizer.json"


def tokenizer_file(path: Path | str) -> Path:
    """The tokenizer.json that PATH names: PATH itself when it is a file, else PATH/tokenizer.json."""
    path = Path(path)
    if path.is_dir():
        path = path / TOKENIZER_FILE
        if not path.is_file():
            raise UserError(f"--tokenizer-from {path.parent} holds no {TOKENIZER_FILE}; give a run folder, a data "
                            f"folder or a {TOKENIZER_FILE} file.")
    elif not path.is_file():
        raise UserError(f"--tokenizer-from {path} does not exist.")
    return path


def reused_tokenizer(path: Path | str, kind: str | None = None) -> Tokenizer:
    """The tokenizer PATH holds (see the module doc); `kind`, when the caller also asked for one (`--tokenizer`),
    must be its kind (a UserError otherwise: the two options would disagree)."""
    tok = load_tokenizer(tokenizer_file(path))
    if kind is not None and kind != tok.kind:
        raise UserError(f"--tokenizer {kind} disagrees with --tokenizer-from {path}, which holds a {tok.kind} "
                        f"tokenizer; leave --tokenizer out.")
    return tok
