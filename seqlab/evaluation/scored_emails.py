"""The emails of a split that completions are scored on, and the check that a run reads a DATA_DIR's ids.

`seqlab eval`, `seqlab calibrate`, `seqlab eval --dynamic` and `Run.saved` share these, so the same seed and
count score the same emails, and a run is never scored on ids from another tokenizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import Tokenizer, load_tokenizer
from seqlab.errors import UserError
from seqlab.evaluation.compressors import split_texts
from seqlab.models.context_encoder import ContextBatch


def check_same_tokenizer(tok: Tokenizer, data_dir: Path, run_dir: Path) -> None:
    """The run must have been trained on ids from this DATA_DIR's tokenizer, or the numbers are noise."""
    data_tok = load_tokenizer(data_dir / "tokenizer.json")
    if data_tok.sha256() != tok.sha256():
        raise UserError(f"{run_dir} was trained with a different tokenizer than {data_dir / 'tokenizer.json'}; "
                        f"evaluate it on the data folder it was trained on.")


def completion_picks(store: TokenStore, emails: int, seed: int) -> np.ndarray:
    """Indices of up to `emails` emails of the split, drawn with `seed`: the emails completions are scored on."""
    rng = np.random.default_rng([seed])
    return np.sort(rng.choice(store.num_emails, size=min(emails, store.num_emails), replace=False))


def completion_texts(store: TokenStore, tok: Tokenizer, emails: int, seed: int) -> list[str]:
    """Texts of the emails of `completion_picks`.

    `seqlab eval` and `seqlab calibrate` share it, so the same seed and count score the same emails.
    """
    return split_texts(store, tok, completion_picks(store, emails, seed))


def completion_contexts(model: Any, store: TokenStore, emails: int, seed: int) -> list[Any] | None:
    """The contexts of the emails of `completion_picks` for a model that reads them, else None."""
    if not getattr(model.cfg, "reads_context", False) or store.contexts is None:
        return None
    limit = model.cfg.ctx_block_size
    return [ContextBatch.from_lists([store.contexts.context(int(i), limit).tolist()])
            for i in completion_picks(store, emails, seed)]
