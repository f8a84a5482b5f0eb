"""The file-level pieces of a checkpoint: atomic writes, weights, trainer state, RNG states.

- `atomic_write_bytes` / `atomic_write_text` / `append_text` / `fsync_dir` come from `seqlab.durable`
  (shared with `prepare`): a crash leaves the old file or the new one, never a mix; a full disk is a
  `DiskFullError` (a `UserError` naming the file); the test-only kill points live there too.
- Weights go through safetensors (no code in the format). safetensors refuses tensors that share storage,
  so tied weights (the output head sharing the token embedding) are saved once and the other names are
  recorded in the file's metadata under `seqlab.tied` as `{alias: saved_name}`; loading puts the alias
  back, and `load_state_dict` copies into the model's one shared parameter, keeping the tie.
- The trainer state is `torch.save`d after checking it holds only tensors and primitives, and read with
  `torch.load(weights_only=True)` and no fallback: anything that needs pickle is refused (`UserError`).
- `capture_rng_state` / `restore_rng_state` turn every RNG the training loop touches (torch CPU, CUDA,
  MPS, numpy's global, python's `random`) into tensors and primitives and back.
- `warn` tells the user about a checkpoint skipped or removed, or a state left unrestored.
"""

from __future__ import annotations

import io
import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import nn

from seqlab.durable import DiskFullError, append_text, atomic_write_bytes, atomic_write_text, fsync_dir
from seqlab.errors import UserError
from seqlab.fault_injection import kill_point

__all__ = [
    "DiskFullError", "append_text", "apply_weights", "atomic_write_bytes", "atomic_write_text",
    "capture_rng_state", "fsync_dir", "kill_point", "load_trainer_state", "load_weights", "restore_rng_state",
    "trainer_state_from_bytes", "trainer_state_to_bytes", "warn", "weights_from_bytes", "weights_to_bytes",
]

TIED_KEY = "seqlab.tied"
_PRIMITIVES = (bool, int, float, str, bytes, type(None))


def warn(message: str) -> None:
    """One plain sentence on stderr, `seqlab: warning: MESSAGE`, and the work goes on.

    For a checkpoint skipped (missing or damaged file) or removed, or an RNG state not restored. Not
    `warnings.warn`: its format adds the source file and line, noise to someone running `seqlab`.
    """
    print(f"seqlab: warning: {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------- weights


def _storage_key(t: torch.Tensor) -> tuple[Any, ...]:
    """Two state-dict entries with equal keys are the same tensor (a tie), not merely equal values."""
    return (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)


def weights_to_bytes(model: nn.Module) -> bytes:
    """The model's state dict as safetensors bytes, tied tensors stored once (see module docstring)."""
    first: dict[tuple[Any, ...], str] = {}
    tensors: dict[str, torch.Tensor] = {}
    tied: dict[str, str] = {}
    for name, t in model.state_dict().items():
        t = t.detach()
        key = _storage_key(t)
        if t.numel() > 0 and key in first:
            tied[name] = first[key]
            continue
        first.setdefault(key, name)
        tensors[name] = t
    # Tensors that overlap a storage without being the same view (rare) are cloned, which safetensors accepts.
    owners: dict[int, int] = {}
    for t in tensors.values():
        ptr = t.untyped_storage().data_ptr()
        owners[ptr] = owners.get(ptr, 0) + (t.numel() > 0)
    out = {
        name: (t.clone() if owners[t.untyped_storage().data_ptr()] > 1 else t).contiguous().cpu()
        for name, t in tensors.items()
    }
    return st_save(out, metadata={"format": "pt", TIED_KEY: json.dumps(tied, sort_keys=True)})


def _safetensors_metadata(data: bytes, source: str) -> dict[str, str]:
    """The `__metadata__` of a safetensors blob: an 8-byte little-endian header length, then JSON."""
    if len(data) < 8:
        raise UserError(f"{source} is not a safetensors file (it is only {len(data)} bytes)")
    n = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8 : 8 + n].decode("utf-8")) if 8 + n <= len(data) else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        header = None
    if not isinstance(header, dict):
        raise UserError(f"{source} is not a safetensors file (its header cannot be read)")
    meta = header.get("__metadata__", {})
    return meta if isinstance(meta, dict) else {}


def weights_from_bytes(data: bytes, source: str) -> dict[str, torch.Tensor]:
    """Parse safetensors bytes into a state dict with tied names restored; `UserError` if malformed."""
    meta = _safetensors_metadata(data, source)
    try:
        weights = st_load(data)
        tied = json.loads(meta.get(TIED_KEY, "{}"))
    except (SafetensorError, json.JSONDecodeError) as exc:
        raise UserError(f"{source} is not a readable safetensors file ({exc})") from None
    if not isinstance(tied, dict) or any(target not in weights for target in tied.values()):
        raise UserError(f"{source} has a broken '{TIED_KEY}' entry in its metadata")
    for alias, target in tied.items():
        weights[alias] = weights[target]
    return weights


def apply_weights(model: nn.Module, weights: dict[str, torch.Tensor], source: str) -> None:
    """Strict `load_state_dict`, with a `UserError` naming missing, unexpected or mis-shaped tensors."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    shapes = [
        f"{k} {tuple(weights[k].shape)} vs {tuple(v.shape)}"
        for k, v in expected.items()
        if k in weights and weights[k].shape != v.shape
    ]
    problems = [
        f"{label}: {', '.join(items[:5])}{' ...' if len(items) > 5 else ''}"
        for label, items in (("missing", missing), ("unexpected", unexpected), ("shape (file vs model)", shapes))
        if items
    ]
    if problems:
        raise UserError(f"{source} does not fit this model ({'; '.join(problems)}); was it made with another config?")
    model.load_state_dict(weights, strict=True)


def load_weights(path: Path, model: nn.Module) -> None:
    """Load a `model.safetensors` file into `model`, strictly; `UserError` if unreadable or mismatched."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read weights {path}: {exc.strerror or exc}") from None
    apply_weights(model, weights_from_bytes(data, str(path)), str(path))


# ----------------------------------------------------------------------------------------- trainer state


def _check_plain(obj: Any, where: str) -> None:
    """ValueError unless `obj` is tensors and primitives only, which `weights_only=True` can read back."""
    if isinstance(obj, torch.Tensor) or isinstance(obj, _PRIMITIVES):
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise ValueError(f"{where} has a key {k!r}; trainer state keys must be str or int")
            _check_plain(v, f"{where}[{k!r}]")
        return
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        for i, v in enumerate(obj):
            _check_plain(v, f"{where}[{i}]")
        return
    raise ValueError(f"{where} is a {type(obj).__name__}; a trainer state holds only tensors and primitives")


def trainer_state_to_bytes(state: dict[str, Any]) -> bytes:
    """`torch.save` bytes of a trainer state, after checking it holds only tensors and primitives."""
    _check_plain(state, "trainer_state")
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def trainer_state_from_bytes(data: bytes, source: str, map_location: Any = "cpu") -> dict[str, Any]:
    """Read a trainer state with `weights_only=True` and no fallback; `UserError` if it needs pickle."""
    try:
        state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - whatever the unpickler rejects, the answer is the same refusal
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(
            f"refusing {source}: it is not a plain trainer state (it would need pickle to load: {first})"
        ) from None
    if not isinstance(state, dict):
        raise UserError(f"refusing {source}: it holds a {type(state).__name__}, not a trainer state dict")
    return state


def load_trainer_state(path: Path, map_location: Any = "cpu") -> dict[str, Any]:
    """Read a `trainer_state.pt` file safely (see `trainer_state_from_bytes`)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read trainer state {path}: {exc.strerror or exc}") from None
    return trainer_state_from_bytes(data, str(path), map_location)


# ------------------------------------------------------------------------------------------------- RNGs


def capture_rng_state() -> dict[str, Any]:
    """Every RNG state as tensors and primitives, for `trainer_state["rng"]`."""
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)  # MT19937: 624 uint32 words
    version, words, gauss_next = random.getstate()  # MT19937: 624 words + index, each < 2**32
    return {
        "torch_cpu": torch.get_rng_state(),
        "torch_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "torch_mps": torch.mps.get_rng_state() if torch.backends.mps.is_available() else None,
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),  # int64 holds every uint32 exactly
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "python": {"version": int(version), "words": torch.tensor(words, dtype=torch.int64), "gauss_next": gauss_next},
    }


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put back what `capture_rng_state` returned; GPU states are restored when the same GPUs exist."""
    torch.set_rng_state(state["torch_cpu"].cpu())
    cuda = list(state.get("torch_cuda") or [])
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])
    elif cuda:
        warn(f"the saved CUDA RNG states ({len(cuda)} devices) do not fit this machine; they were not restored")
    if state.get("torch_mps") is not None and torch.backends.mps.is_available():
        torch.mps.set_rng_state(state["torch_mps"].cpu())
    npy = state["numpy"]
    keys = npy["keys"].cpu().numpy().astype(np.uint32)
    np.random.set_state((npy["kind"], keys, npy["pos"], npy["has_gauss"], npy["cached_gaussian"]))
    py = state["python"]
    random.setstate((py["version"], tuple(int(w) for w in py["words"].tolist()), py["gauss_next"]))
