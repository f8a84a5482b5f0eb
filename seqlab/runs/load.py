"""Reading a trained RUN_DIR back for evaluation and completion: `load_run`, `run_data_dir`, `resolve_device`,
`read_checkpoint`, `checkpoint_config`.

A RUN_DIR (ARCHITECTURE.md, "RUN_DIR"; layout in `seqlab.runs.checkpoint`) holds verified checkpoint directories.
`load_run` takes the best-by-validation checkpoint (`best/`) when there is one, else the newest that
verifies, rebuilds the model from that checkpoint's `config.json`, loads its weights strictly and reads
its `tokenizer.json`. Nothing is unpickled: weights are safetensors, the config and tokenizer are JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from seqlab.config import RunConfig
from seqlab.data.tokenizer import Tokenizer, load_tokenizer, tokenizer_from_json
from seqlab.errors import UserError
from seqlab.models import build_model
from seqlab.runs.checkpoint import LoadedCheckpoint, load_best, load_latest


def resolve_device(name: str = "auto") -> torch.device:
    """`auto` picks CUDA, then Apple MPS, then the CPU; an explicit device must be available."""
    mps = getattr(torch.backends, "mps", None)
    has_mps = mps is not None and mps.is_available()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "mps" if has_mps else "cpu")
    if name not in ("cpu", "cuda", "mps"):
        raise UserError(f"device must be auto, cpu, cuda or mps, not {name!r}.")
    if (name == "cuda" and not torch.cuda.is_available()) or (name == "mps" and not has_mps):
        raise UserError(f"device {name} was asked for but is not available on this machine.")
    return torch.device(name)


def read_checkpoint(run_dir: Path, which: str) -> LoadedCheckpoint:
    """RUN_DIR's best (or latest) verified checkpoint; `UserError` naming the damage when none is usable."""
    if which not in ("best", "latest"):
        raise ValueError(f"which must be 'best' or 'latest', not {which!r}")
    skipped: list[str] = []
    ckpt = load_best(run_dir, skipped=skipped) if which == "best" else None
    ckpt = ckpt or load_latest(run_dir, skipped=skipped)
    if ckpt is None and skipped:
        # every copy is damaged: say which file, not only that nothing was found (the warnings list them all)
        raise UserError(f"{run_dir} holds no usable checkpoint: {skipped[0]}.")
    if ckpt is None:
        raise UserError(f"{run_dir} holds no usable checkpoint; train a model there first with `seqlab train`.")
    return ckpt


def checkpoint_config(ckpt: LoadedCheckpoint) -> RunConfig:
    """The RunConfig in a checkpoint's config.json; `UserError` naming the file if it is not one."""
    try:
        body = json.loads(ckpt.config_json)
        if not isinstance(body, dict):
            raise TypeError(f"it holds a JSON {type(body).__name__}, not an object")
        return RunConfig.from_dict(body)
    except (json.JSONDecodeError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        raise UserError(f"{ckpt.path / 'config.json'} is not a valid seqlab config ({exc}).") from None


def load_run(run_dir: Path | str, device: str | torch.device = "auto",
             which: str = "best") -> tuple[nn.Module, Tokenizer, RunConfig]:
    """(model in eval mode on `device`, tokenizer, config) of RUN_DIR's best (or latest) checkpoint."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a run folder.")
    ckpt = read_checkpoint(run_dir, which)
    cfg = checkpoint_config(ckpt)
    tok_path = ckpt.path / "tokenizer.json" if ckpt.tokenizer_json is not None else run_dir / "tokenizer.json"
    if ckpt.tokenizer_json is not None:
        tok = tokenizer_from_json(ckpt.tokenizer_json, str(tok_path))
    elif tok_path.is_file():
        tok = load_tokenizer(tok_path)
    else:
        raise UserError(f"{run_dir} has no tokenizer.json; the run folder is incomplete.")
    if tok.vocab_size != cfg.model.vocab_size:
        raise UserError(f"{tok_path} has {tok.vocab_size} ids but the model in {ckpt.path / 'config.json'} "
                        f"expects {cfg.model.vocab_size}; the run folder mixes files of two runs.")
    model = build_model(cfg.model)
    ckpt.load_into(model)
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    return model.to(dev).eval(), tok, cfg


def run_data_dir(run_dir: Path | str, data_dir: Path | str | None = None) -> Path:
    """The DATA_DIR to evaluate on: the one given, else the one the trainer recorded in `run.json`."""
    if data_dir is not None:
        return Path(data_dir)
    info_path = Path(run_dir) / "run.json"
    recorded = None
    if info_path.is_file():
        try:
            info = json.loads(info_path.read_text(encoding="utf-8"))
            recorded = info.get("data_dir") if isinstance(info, dict) else None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            recorded = None
    if not isinstance(recorded, str) or not Path(recorded).is_dir():
        raise UserError(f"{run_dir} does not record a data folder that exists here; pass it with --data DATA_DIR.")
    return Path(recorded)
