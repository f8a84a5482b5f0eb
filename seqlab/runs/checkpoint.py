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

Every file is written atomically (`seqlab.runs.files.atomic_write_bytes`), and the manifest last: the
manifest is the commit marker, so a directory whose manifest is missing, or whose files do not match their
listed size and sha256, is an incomplete or damaged checkpoint. Before a directory is rewritten its
manifest is removed first, so a crash in the middle never leaves a manifest vouching for mixed files.

Saving (`save_run_checkpoint`) writes the step directory, then the mirror, then (if asked) `best/`, and
only then deletes step directories beyond the newest `keep`. `best/` is replaced by a rename swap through
`best.new/` and `best.old/`, so a crash leaves either the old or the new best complete.

Loading (`load_latest`) considers every step directory, the mirror, `best/` (and `best.old/`), newest step
first, and returns the first whose manifest verifies; each one skipped is reported on stderr in one
line naming the bad file (`seqlab.runs.files.warn`). When none verifies it returns None (the caller
decides whether that is an error). `trainer_state.pt` is read with `torch.load(weights_only=True)` and
no fallback: a file that needs pickle is refused with a `UserError` and none of its code runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from seqlab.errors import UserError
from seqlab.runs.files import (
    apply_weights,
    atomic_write_bytes,
    atomic_write_text,
    capture_rng_state,
    fsync_dir,
    load_trainer_state,
    load_weights,
    restore_rng_state,
    trainer_state_from_bytes,
    trainer_state_to_bytes,
    warn,
    weights_from_bytes,
    weights_to_bytes,
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

WEIGHTS = "model.safetensors"
TRAINER_STATE = "trainer_state.pt"
CONFIG = "config.json"
TOKENIZER = "tokenizer.json"
MANIFEST = "manifest.json"
REQUIRED = (WEIGHTS, TRAINER_STATE, CONFIG)
FORMAT = "seqlab-checkpoint"
VERSION = 1
_STEP_DIR = re.compile(r"step_(\d+)")


class _Damaged(Exception):
    """Internal: a checkpoint directory that does not verify; the message names the bad file."""


@dataclass
class LoadedCheckpoint:
    """One verified checkpoint, read into memory."""

    path: Path  # the directory whose manifest verified
    step: int
    weights: dict[str, torch.Tensor]  # tied names restored, so `model.load_state_dict` accepts it
    trainer_state: dict[str, Any]
    config_json: str
    tokenizer_json: str | None

    def load_into(self, model: nn.Module) -> None:
        """Copy the weights into `model` (strict; `UserError` naming the mismatch)."""
        apply_weights(model, self.weights, str(self.path / WEIGHTS))


# ---------------------------------------------------------------------------------------------- saving


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
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    if created:
        fsync_dir(ckpt_dir.parent)  # make the new directory's own entry durable
    manifest = ckpt_dir / MANIFEST
    if manifest.exists():
        manifest.unlink()
        fsync_dir(ckpt_dir)
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


def _step_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, path) of every `checkpoints/step_N` directory, oldest first."""
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.fullmatch(p.name)) and p.is_dir()]
    return sorted(found)


def _prune(run_dir: Path, step: int, keep: int) -> None:
    """Delete step directories beyond the newest `keep` (the one just written counts)."""
    dirs = _step_dirs(run_dir)
    for s, path in dirs:
        if s > step:
            # A later step than the one just saved can only exist when the run resumed from an earlier
            # checkpoint because that later one did not verify: it belongs to an abandoned timeline.
            warn(f"removing {path}: it is newer than the resumed run's step {step}")
            shutil.rmtree(path)
    older = [path for s, path in dirs if s <= step]
    for path in older[: max(len(older) - keep, 0)]:
        shutil.rmtree(path)


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
    os.replace(new, best)
    fsync_dir(run_dir)
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


# --------------------------------------------------------------------------------------------- loading


def _read_manifest(ckpt_dir: Path) -> dict[str, Any]:
    path = ckpt_dir / MANIFEST
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _Damaged(f"{path} is missing (the checkpoint was never completed)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _Damaged(f"{path} cannot be read ({exc})") from None
    ok = (
        isinstance(body, dict)
        and body.get("format") == FORMAT
        and isinstance(body.get("step"), int)
        and isinstance(body.get("files"), dict)
        and all(name in body["files"] for name in REQUIRED)
    )
    if not ok:
        raise _Damaged(f"{path} is not a seqlab checkpoint manifest")
    if body.get("version") != VERSION:
        raise _Damaged(f"{path} has version {body.get('version')!r}; this seqlab reads version {VERSION}")
    return body


def _verify(ckpt_dir: Path, manifest: dict[str, Any]) -> dict[str, bytes]:
    """Read every listed file and check its size and sha256; returns the bytes that were checked."""
    data: dict[str, bytes] = {}
    for name, entry in manifest["files"].items():
        path = ckpt_dir / name
        if "/" in name or "\\" in name or name in ("", ".", ".."):
            raise _Damaged(f"{ckpt_dir / MANIFEST} lists a file outside its directory: {name!r}")
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            raise _Damaged(f"{path} is missing") from None
        except OSError as exc:
            raise _Damaged(f"{path} cannot be read ({exc})") from None
        if len(blob) != entry.get("size"):
            raise _Damaged(f"{path} has {len(blob)} bytes, the manifest says {entry.get('size')}")
        if hashlib.sha256(blob).hexdigest() != entry.get("sha256"):
            raise _Damaged(f"{path} is corrupt (its sha256 does not match the manifest)")
        data[name] = blob
    return data


def _load_dir(ckpt_dir: Path, map_location: Any) -> LoadedCheckpoint:
    """Verify and read one checkpoint; `_Damaged` if it does not verify, `UserError` if it needs pickle."""
    manifest = _read_manifest(ckpt_dir)
    data = _verify(ckpt_dir, manifest)
    try:
        weights = weights_from_bytes(data[WEIGHTS], str(ckpt_dir / WEIGHTS))
        config_json = data[CONFIG].decode("utf-8")
        tokenizer_json = data[TOKENIZER].decode("utf-8") if TOKENIZER in data else None
    except (UserError, UnicodeDecodeError) as exc:
        raise _Damaged(str(exc)) from None
    # No fallback here: a trainer state that needs pickle is refused, not skipped in favour of another.
    state = trainer_state_from_bytes(data[TRAINER_STATE], str(ckpt_dir / TRAINER_STATE), map_location)
    return LoadedCheckpoint(ckpt_dir, manifest["step"], weights, state, config_json, tokenizer_json)


def load_checkpoint(ckpt_dir: Path, map_location: Any = "cpu") -> LoadedCheckpoint:
    """Load one checkpoint directory; `UserError` naming the bad file if it does not verify."""
    try:
        return _load_dir(Path(ckpt_dir), map_location)
    except _Damaged as exc:
        raise UserError(f"cannot use checkpoint {ckpt_dir}: {exc}") from None


def _candidates(run_dir: Path) -> list[Path]:
    """Checkpoint directories of a run, newest step first; at equal steps the history comes first."""
    ranked: list[tuple[int, int, Path]] = []
    places = [(0, p) for _, p in _step_dirs(run_dir)]
    places += [(1, run_dir), (2, run_dir / "best"), (3, run_dir / "best.old")]
    for rank, path in places:
        if rank > 0 and not ((path / MANIFEST).exists() or (path / WEIGHTS).exists()):
            continue  # no mirror / no best yet: nothing to report
        try:
            step = _read_manifest(path)["step"]
        except _Damaged as exc:
            warn(f"skipping checkpoint {path}: {exc}; trying the others")
            continue
        ranked.append((-step, rank, path))
    return [path for _, _, path in sorted(ranked)]


def load_latest(run_dir: Path, map_location: Any = "cpu") -> LoadedCheckpoint | None:
    """The newest checkpoint of RUN_DIR that verifies, or None if there is none.

    Each checkpoint skipped on the way (missing or corrupt file) is reported on stderr, naming the file.
    A verified `trainer_state.pt` that needs pickle raises `UserError`.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return None
    for path in _candidates(run_dir):
        try:
            return _load_dir(path, map_location)
        except _Damaged as exc:
            warn(f"skipping checkpoint {path}: {exc}; trying an older one")
    return None


def load_best(run_dir: Path, map_location: Any = "cpu") -> LoadedCheckpoint | None:
    """The best-by-validation checkpoint of RUN_DIR, or None if there is none that verifies."""
    for path in (Path(run_dir) / "best", Path(run_dir) / "best.old"):
        if path.is_dir():
            try:
                return _load_dir(path, map_location)
            except _Damaged as exc:
                warn(f"skipping checkpoint {path}: {exc}")
    return None
