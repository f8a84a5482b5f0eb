"""The context of a completion: the message being answered, as the model reads it.

`reply_context` turns the original's text (`seqlab.data.mail.reader.original_text` reads a message
file or plain text and cleans it as `prepare` cleans a context) into the `ContextBatch` a model with
`model.context` reads: the same tokenizer, its last `model.ctx_block_size` tokens. A model
without cross-attention cannot read one: a UserError says so rather than silently ignoring it.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from seqlab.data.mail.reader import original_text
from seqlab.data.tokenizer import Tokenizer
from seqlab.errors import UserError
from seqlab.models.context_encoder import ContextBatch


def reads_context(model: nn.Module) -> bool:
    """True when the model has cross-attention over a context."""
    cfg = getattr(model, "cfg", None)
    return bool(cfg is not None and cfg.reads_context)


def reply_context(model: nn.Module, tokenizer: Tokenizer, text: str | None) -> ContextBatch | None:
    """The context batch (one lane) of `text`, None for no text. An empty context and none are the same
    to the model (its cross-attention reads nothing either way)."""
    if text is None:
        return None
    if not reads_context(model):
        raise UserError("this run's model reads no context (it was trained with model.context=none); "
                        "leave out the message being replied to")
    ids = tokenizer.encode(text)[-model.cfg.ctx_block_size:] if text else []
    return ContextBatch.from_lists([ids])


def read_reply_to(path: Path) -> str:
    """The cleaned text of the message file (or plain text file) at `path`; a UserError if unreadable."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"--reply-to {path} cannot be read ({exc.strerror or exc})") from None
    return original_text(raw)
