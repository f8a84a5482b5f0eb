"""Checkpoints of a training run: verified directories, history, the best by validation loss, safe loading.

Layout of a RUN_DIR (the contract is in ARCHITECTURE.md, "RUN_DIR"):

    RUN_DIR/
      model.safetensors  trainer_state.pt  config.json  tokenizer.json  manifest.json
          a mirror of the newest complete checkpoint, where `eval` and `complete` look
      checkpoints/step_000123/   the newest `keep` step checkpoints (K = 2 by default)
      best/                      the checkpoint with the lowest validation loss so far
      metrics.jsonl              written by the trainer, never touched here

Every checkpoint directory (a step directory, `best/`, and RUN_DIR itself as the mirror) holds
`model.safetensors`, `trainer_state.pt`, `config.json`, optionally `tokenizer.json`, and `manifest.json`:

    {"format": "seqlab-checkpoint", "version": 1, "step": 123,
     "files": {"model.safetensors": {"size": 4096, "sha256": "..."}, ...}}

Every file is written atomically (`seqlab.runs.checkpoint_files.atomic_write_bytes`), and the manifest last: the
manifest is the commit marker, so a directory whose manifest is missing, or whose files do not match their
listed size and sha256, is an incomplete or damaged checkpoint. Before a directory is rewritten its
manifest is removed first, so a crash in the middle never leaves a manifest vouching for mixed files.

Saving (`save_run_checkpoint`) writes the step directory, then the mirror, then (if asked) `best/`, and
only then deletes step directories beyond the newest `keep`. `best/` is replaced by a rename swap through
`best.new/` and `best.old/`, so a crash leaves either the old or the new best complete.

Loading (`load_latest`, `load_best`, `load_checkpoint`) lives in `seqlab.runs.verify` and is re-exported
here: the newest directory whose manifest verifies, each one skipped reported on stderr naming the bad file.

A write killed at any point (SIGKILL, power cut) leaves the previous checkpoint complete and at worst a
temporary `.NAME.<random>.tmp` file, which the next write of that directory removes. A full disk is a
`DiskFullError` (a `UserError` naming the file) and leaves the directory being written uncommitted.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from torch import nn

from seqlab.private_files import make_private_dirs
from seqlab.runs.checkpoint_files import (
    apply_weights,
    atomic_write_bytes,
    atomic_write_text,
    capture_rng_state,
    fsync_dir,
    kill_point,
    load_trainer_state,
    load_weights,
    restore_rng_state,
    trainer_state_to_bytes,
    warn,
    weights_to_bytes,
)
from seqlab.runs.verify import (
    CONFIG,
    FORMAT,
    MANIFEST,
    TOKENIZER,
    TRAINER_STATE,
    VERSION,
    WEIGHTS,
    LoadedCheckpoint,
    load_best,
    load_checkpoint,
    load_latest,
    step_dirs,
)

__all__ = [
    "LoadedCheckpoint",
    "apply_weights",
    "atomic_write_bytes",
    "atomic_write_text",
    "capture_rng_state",
    "load_best",
    "load_checkpoint",
    "load_latest",
    "load_trainer_state",
    "load_weights",
    "restore_rng_state",
    "save_checkpoint",
    "save_run_checkpoint",
]


# ---------------------------------------------------------------------------------------------- saving

# The temporary names `atomic_write_bytes` gives the files of a checkpoint (and the trainer's run.json): a
# write killed before its rename leaves one behind. Only the trainer writes these names, so the next write
# of the directory may remove them; other temporaries (calibration.json, being written by a concurrent
# `seqlab calibrate`) are not ours to touch.
_STALE_TEMP = re.compile(
    r"\.(model\.safetensors|trainer_state\.pt|config\.json|tokenizer\.json|manifest\.json|run\.json)"
    r"\.[0-9a-f]{12}\.tmp")


def _serialize(
    model: nn.Module, trainer_state: dict[str, Any], config_json: str, tokenizer_json: str | None
) -> tuple[dict[str, bytes], int]:
    """All files of one checkpoint as bytes, and its step (`trainer_state["step"]`)."""
    step = trainer_state.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"trainer_state['step'] must be an int >= 0, not {step!r}")
    files = {
        WEIGHTS: weights_to_bytes(model),
        TRAINER_STATE: trainer_state_to_bytes(trainer_state),
        CONFIG: config_json.encode("utf-8"),
    }
    if tokenizer_json is not None:
        files[TOKENIZER] = tokenizer_json.encode("utf-8")
    return files, step


def _write_dir(ckpt_dir: Path, files: dict[str, bytes], step: int) -> None:
    """Write one checkpoint directory: un-commit (drop the old manifest), files, then the manifest."""
    created = not ckpt_dir.exists()
    make_private_dirs(ckpt_dir)
    if created:
        fsync_dir(ckpt_dir.parent)  # make the new directory's own entry durable
    manifest = ckpt_dir / MANIFEST
    if manifest.exists():
        manifest.unlink()
        fsync_dir(ckpt_dir)
        kill_point(f"{ckpt_dir.name}:uncommitted")
    remove_stale_temps(ckpt_dir)
    for name, data in files.items():
        atomic_write_bytes(ckpt_dir / name, data)
    entries = {name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()} for name, data in files.items()}
    body = {"format": FORMAT, "version": VERSION, "step": step, "files": entries}
    atomic_write_text(manifest, json.dumps(body, indent=2) + "\n")


def save_checkpoint(
    ckpt_dir: Path,
    model: nn.Module,
    trainer_state: dict[str, Any],
    config_json: str,
    tokenizer_json: str | None,
) -> None:
    """Write one complete checkpoint directory (files atomically, manifest last).

    `trainer_state` must hold only tensors and primitives (dict, list, tuple, str, int, float, bool,
    None, bytes) and an int `step`; anything else is a ValueError raised before any file is written.
    """
    files, step = _serialize(model, trainer_state, config_json, tokenizer_json)
    _write_dir(Path(ckpt_dir), files, step)


def remove_stale_temps(directory: Path) -> None:
    """Delete the temporaries that killed writes of checkpoint files left in `directory` (see `_STALE_TEMP`)."""
    for path in directory.iterdir():
        if _STALE_TEMP.fullmatch(path.name):
            path.unlink(missing_ok=True)


def _remove_dir(path: Path) -> None:
    """Delete a checkpoint directory, manifest first: a deletion cut short leaves an uncommitted directory."""
    (path / MANIFEST).unlink(missing_ok=True)
    kill_point(f"{path.parent.name}/{path.name}:removing")
    shutil.rmtree(path)


def _prune(run_dir: Path, step: int, keep: int) -> None:
    """Delete step directories beyond the newest `keep` (the one just written counts)."""
    dirs = step_dirs(run_dir)
    for s, path in dirs:
        if s > step:
            # A later step than the one just saved can only exist when the run resumed from an earlier
            # checkpoint because that later one did not verify: it belongs to an abandoned timeline.
            warn(f"removing {path}: it is newer than the resumed run's step {step}")
            _remove_dir(path)
    older = [path for s, path in dirs if s <= step]
    for path in older[: max(len(older) - keep, 0)]:
        _remove_dir(path)


def _replace_best(run_dir: Path, files: dict[str, bytes], step: int) -> None:
    """Swap in a new `best/` so that a crash at any point leaves one complete best checkpoint."""
    best, new, old = run_dir / "best", run_dir / "best.new", run_dir / "best.old"
    if old.exists():
        if best.exists():
            shutil.rmtree(old)  # a swap that finished except for its clean-up
        else:
            os.replace(old, best)  # a swap interrupted between its two renames: put the old best back
    if new.exists():
        shutil.rmtree(new)
    _write_dir(new, files, step)
    if best.exists():
        os.replace(best, old)
        kill_point(f"{run_dir.name}/best:old-moved")
    os.replace(new, best)
    fsync_dir(run_dir)
    kill_point(f"{run_dir.name}/best:new-moved")
    if old.exists():
        shutil.rmtree(old)


def save_run_checkpoint(
    run_dir: Path,
    model: nn.Module,
    trainer_state: dict[str, Any],
    config_json: str,
    tokenizer_json: str | None,
    *,
    is_best: bool = False,
    keep: int = 2,
) -> Path:
    """Save step `trainer_state["step"]` into RUN_DIR's history, mirror and (if `is_best`) `best/`.

    Returns the step directory. Older step directories are deleted only after the new one is complete.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1, not {keep}")
    run_dir = Path(run_dir)
    files, step = _serialize(model, trainer_state, config_json, tokenizer_json)
    ckpt_dir = run_dir / "checkpoints" / f"step_{step:06d}"
    _write_dir(ckpt_dir, files, step)
    _write_dir(run_dir, files, step)
    if is_best:
        _replace_best(run_dir, files, step)
    _prune(run_dir, step, keep)
    return ckpt_dir
