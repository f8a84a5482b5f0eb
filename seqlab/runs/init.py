"""Starting a new run from a trained one (`seqlab train --init RUN_DIR0`): `init_config`, `init_weights`.

Adapting a general model to one mailbox starts from the general run's weights, its tokenizer and its model
settings, with a fresh optimizer and learning-rate schedule (the trainer's own). The weights come from the
init run's best checkpoint (`best/`, else the newest that verifies), as `load_run` reads it. Token ids
only mean the same thing under the same tokenizer, so a DATA_DIR whose tokenizer differs (vocabulary or
sha256 of tokenizer.json) is refused, naming both; to adapt to a mailbox, prepare it with the tokenizer the
general run used (the byte tokenizer is the same everywhere).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from torch import nn

from seqlab.config import RunConfig
from seqlab.data.tokenizer import Tokenizer, load_tokenizer, tokenizer_from_json
from seqlab.errors import UserError
from seqlab.runs.load import checkpoint_config, read_checkpoint

__all__ = ["init_config", "init_weights"]


def init_config(init_dir: Path | str) -> RunConfig:
    """The config of `init_dir`'s best checkpoint: the model settings the new run starts from."""
    init_dir = Path(init_dir)
    if not init_dir.is_dir():
        raise UserError(f"--init {init_dir} is not a run folder.")
    return checkpoint_config(read_checkpoint(init_dir, "best"))


def _init_tokenizer(init_dir: Path, ckpt_tokenizer: str | None) -> Tokenizer:
    if ckpt_tokenizer is not None:
        return tokenizer_from_json(ckpt_tokenizer, str(init_dir / "tokenizer.json"))
    if not (init_dir / "tokenizer.json").is_file():
        raise UserError(f"--init {init_dir} has no tokenizer.json; the run folder is incomplete.")
    return load_tokenizer(init_dir / "tokenizer.json")


def _same_model(a: RunConfig, b: RunConfig) -> bool:
    """Equal model settings up to dropout (dropout changes no weight shape; adapting may want more)."""
    return dataclasses.replace(a.model, dropout=b.model.dropout) == b.model


def init_weights(model: nn.Module, cfg: RunConfig, init_dir: Path | str, tok: Tokenizer, data_dir: Path) -> int:
    """Copy `init_dir`'s best weights into `model` (built from `cfg`) in place; the step they were saved at.

    `UserError` when `tok` (DATA_DIR's tokenizer) is not the init run's, naming both, or when `cfg`
    changed a model setting other than dropout (the weights would not fit).
    """
    init_dir = Path(init_dir)
    ckpt = read_checkpoint(init_dir, "best")
    theirs = _init_tokenizer(init_dir, ckpt.tokenizer_json)
    if theirs.vocab_size != tok.vocab_size or theirs.sha256() != tok.sha256():
        raise UserError(
            f"--init {init_dir} was trained with another tokenizer ({theirs.kind}, vocab {theirs.vocab_size}, "
            f"sha256 {theirs.sha256()[:12]}) than {data_dir / 'tokenizer.json'} ({tok.kind}, vocab "
            f"{tok.vocab_size}, sha256 {tok.sha256()[:12]}); prepare the data with the init run's tokenizer.")
    if not _same_model(checkpoint_config(ckpt), cfg):
        raise UserError(f"model settings come from --init {init_dir} and cannot change (except model.dropout); "
                        f"only train.* and data.* overrides apply.")
    ckpt.load_into(model)
    return ckpt.step
