"""Reading checkpoints back: the manifest, verification against it, and the newest checkpoint that verifies.

The layout and the write order are in `seqlab.runs.checkpoint`. A checkpoint directory counts only if its
`manifest.json` (the commit marker, written last) is there and every file it lists has the listed size
and sha256. `load_latest` considers every step directory, the mirror, `best/` (and `best.old/`), newest
step first, and returns the first that verifies; each one skipped is reported on stderr in one line
naming the bad file (`seqlab.runs.checkpoint_files.warn`), and the reasons are handed back to a caller that asks, so
that "no usable checkpoint" can say why. `trainer_state.pt` is read with `torch.load(weights_only=True)`
and no fallback: a file that needs pickle is refused with a `UserError` and none of its code runs.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from seqlab.errors import UserError
from seqlab.runs.checkpoint_files import apply_weights, trainer_state_from_bytes, warn, weights_from_bytes

WEIGHTS = "model.safetensors"
TRAINER_STATE = "trainer_state.pt"
CONFIG = "config.json"
TOKENIZER = "tokenizer.json"
MANIFEST = "manifest.json"
REQUIRED = (WEIGHTS, TRAINER_STATE, CONFIG)
FORMAT = "seqlab-checkpoint"
VERSION = 1
_STEP_DIR = re.compile(r"step_(\d+)")


class Damaged(Exception):
    """A checkpoint directory that does not verify; the message names the bad file."""


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


def step_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, path) of every `checkpoints/step_N` directory, oldest first."""
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.fullmatch(p.name)) and p.is_dir()]
    return sorted(found)


def read_manifest(ckpt_dir: Path) -> dict[str, Any]:
    """The parsed manifest of `ckpt_dir`; `Damaged` if missing, unreadable or not a seqlab manifest."""
    path = ckpt_dir / MANIFEST
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise Damaged(f"{path} is missing (the checkpoint was never completed)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:  # nested too deep
        raise Damaged(f"{path} cannot be read ({exc})") from None
    ok = (
        isinstance(body, dict)
        and body.get("format") == FORMAT
        and isinstance(body.get("step"), int)
        and isinstance(body.get("files"), dict)
        and all(name in body["files"] for name in REQUIRED)
        and all(isinstance(entry, dict) for entry in body["files"].values())
    )
    if not ok:
        raise Damaged(f"{path} is not a seqlab checkpoint manifest")
    if body.get("version") != VERSION:
        raise Damaged(f"{path} has version {body.get('version')!r}; this seqlab reads version {VERSION}")
    return body


def _verify(ckpt_dir: Path, manifest: dict[str, Any]) -> dict[str, bytes]:
    """Read every listed file and check its size and sha256; returns the bytes that were checked."""
    data: dict[str, bytes] = {}
    for name, entry in manifest["files"].items():
        path = ckpt_dir / name
        if "/" in name or "\\" in name or name in ("", ".", ".."):
            raise Damaged(f"{ckpt_dir / MANIFEST} lists a file outside its directory: {name!r}")
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            raise Damaged(f"{path} is missing") from None
        except OSError as exc:
            raise Damaged(f"{path} cannot be read ({exc})") from None
        if len(blob) != entry.get("size"):
            raise Damaged(f"{path} has {len(blob)} bytes, the manifest says {entry.get('size')}")
        if hashlib.sha256(blob).hexdigest() != entry.get("sha256"):
            raise Damaged(f"{path} is corrupt (its sha256 does not match the manifest)")
        data[name] = blob
    return data


def _text(data: dict[str, bytes], name: str, ckpt_dir: Path) -> str:
    """A JSON file of the checkpoint as text; `Damaged` naming it if it is not UTF-8."""
    try:
        return data[name].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Damaged(f"{ckpt_dir / name} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _load_dir(ckpt_dir: Path, map_location: Any) -> LoadedCheckpoint:
    """Verify and read one checkpoint; `Damaged` if it does not verify, `UserError` if it needs pickle."""
    manifest = read_manifest(ckpt_dir)
    data = _verify(ckpt_dir, manifest)
    try:
        weights = weights_from_bytes(data[WEIGHTS], str(ckpt_dir / WEIGHTS))
    except UserError as exc:
        raise Damaged(str(exc)) from None
    config_json = _text(data, CONFIG, ckpt_dir)
    tokenizer_json = _text(data, TOKENIZER, ckpt_dir) if TOKENIZER in data else None
    # No fallback here: a trainer state that needs pickle is refused, not skipped in favour of another.
    state = trainer_state_from_bytes(data[TRAINER_STATE], str(ckpt_dir / TRAINER_STATE), map_location)
    return LoadedCheckpoint(ckpt_dir, manifest["step"], weights, state, config_json, tokenizer_json)


def load_checkpoint(ckpt_dir: Path, map_location: Any = "cpu") -> LoadedCheckpoint:
    """Load one checkpoint directory; `UserError` naming the bad file if it does not verify."""
    try:
        return _load_dir(Path(ckpt_dir), map_location)
    except Damaged as exc:
        raise UserError(f"cannot use checkpoint {ckpt_dir}: {exc}") from None


def _skip(path: Path, exc: Damaged, then: str | None, skipped: list[str] | None) -> None:
    warn(f"skipping checkpoint {path}: {exc}" + (f"; {then}" if then else ""))
    if skipped is not None:
        skipped.append(str(exc))


def _candidates(run_dir: Path, skipped: list[str] | None) -> list[Path]:
    """Checkpoint directories of a run, newest step first; at equal steps the history comes first."""
    ranked: list[tuple[int, int, Path]] = []
    places = [(0, p) for _, p in step_dirs(run_dir)]
    places += [(1, run_dir), (2, run_dir / "best"), (3, run_dir / "best.old")]
    for rank, path in places:
        if rank > 0 and not ((path / MANIFEST).exists() or (path / WEIGHTS).exists()):
            continue  # no mirror / no best yet: nothing to report
        try:
            step = read_manifest(path)["step"]
        except Damaged as exc:
            _skip(path, exc, "trying the others", skipped)
            continue
        ranked.append((-step, rank, path))
    return [path for _, _, path in sorted(ranked)]


def load_latest(run_dir: Path, map_location: Any = "cpu", skipped: list[str] | None = None
                ) -> LoadedCheckpoint | None:
    """The newest checkpoint of RUN_DIR that verifies, or None if there is none.

    Each checkpoint skipped on the way (missing or corrupt file) is reported on stderr, naming the file,
    and its reason appended to `skipped` when given. A verified `trainer_state.pt` that needs pickle
    raises `UserError`.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return None
    for path in _candidates(run_dir, skipped):
        try:
            return _load_dir(path, map_location)
        except Damaged as exc:
            _skip(path, exc, "trying an older one", skipped)
    return None


def load_best(run_dir: Path, map_location: Any = "cpu", skipped: list[str] | None = None
              ) -> LoadedCheckpoint | None:
    """The best-by-validation checkpoint of RUN_DIR, or None if there is none that verifies."""
    for path in (Path(run_dir) / "best", Path(run_dir) / "best.old"):
        if path.is_dir():
            try:
                return _load_dir(path, map_location)
            except Damaged as exc:
                _skip(path, exc, None, skipped)
    return None
