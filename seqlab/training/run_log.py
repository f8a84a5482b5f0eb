"""The run's own record, beside its checkpoints: `metrics.jsonl` (one JSON line per logged step or
evaluation) and `run.json` (where the data is, what ran it, the final summary).

Both are written by rank 0 alone (`is_main`); neither is needed to rebuild the model (the checkpoint's
config.json is). Writes are whole or absent: a line is appended in one write, run.json replaced atomically,
so a SIGKILL never leaves a half line that a resume would read as a record (`seqlab.runs.checkpoint_files`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from seqlab.runs.checkpoint_files import append_text, atomic_write_text
from seqlab.training.guards import finite_or_none
from seqlab.version import __version__

__all__ = ["RunLog", "saved_recipe"]


class RunLog:
    """metrics.jsonl and run.json of one RUN_DIR; every method is a no-op on ranks other than 0."""

    def __init__(self, run_dir: Path, is_main: bool = True) -> None:
        self.run_dir, self.is_main = Path(run_dir), is_main

    @property
    def metrics_path(self) -> Path:
        return self.run_dir / "metrics.jsonl"

    def append(self, record: dict[str, Any]) -> None:
        """One line of metrics.jsonl; NaN and Infinity are not JSON, so they are written as null."""
        if self.is_main:
            append_text(self.metrics_path, json.dumps(finite_or_none(record)) + "\n")  # whole line or nothing

    def truncate(self, step: int) -> None:
        """Drop the lines written after `step` (the checkpoint a resume starts from), so metrics.jsonl
        stays the record of one run."""
        path = self.metrics_path
        if self.is_main and path.exists():
            lines = [ln for ln in path.read_text(errors="replace").splitlines() if _step_of(ln) <= step]
            atomic_write_text(path, "".join(ln + "\n" for ln in lines))  # a kill here must not lose the log

    def write_info(self, fields: dict[str, Any], summary: dict[str, Any] | None = None) -> None:
        """run.json: `fields` (data_dir, device, mode, params, ...) plus the versions and thread count that
        ran it, and the final `summary` once there is one."""
        info = {**fields, "threads": torch.get_num_threads(), "torch": torch.__version__, "seqlab": __version__}
        if summary:
            info["summary"] = summary
        if self.is_main:
            atomic_write_text(self.run_dir / "run.json", json.dumps(info, indent=2) + "\n")


def _step_of(line: str) -> float:
    """The step of a metrics.jsonl line; a line torn by a kill mid-append counts as past any step (dropped)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return float("inf")
    step = record.get("step", 0) if isinstance(record, dict) else float("inf")
    return step if isinstance(step, int) else float("inf")


def saved_recipe(run_dir: Path) -> dict[str, Any] | None:
    """The recipe an earlier session of this run recorded in run.json, if any."""
    try:
        return json.loads((Path(run_dir) / "run.json").read_text()).get("recipe")
    except (OSError, ValueError, AttributeError):
        return None
