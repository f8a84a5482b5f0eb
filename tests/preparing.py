"""`prepare` as the tests call it: the `PrepareConfig` fields and the run settings as keywords in one call
(the package's `prepare` takes a config; `seqlab.prepare` in the API does the same with its own checks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seqlab.data.prepare.options import PrepareConfig
from seqlab.data.prepare.pipeline import prepare as prepare_config

_RUN = ("workers", "cache_dir", "progress", "stats")


def prepare(source: str | Path, out: Path, **options: Any) -> dict:
    """`pipeline.prepare(PrepareConfig(source, **fields), out, **run settings)`; returns meta.json's content."""
    run = {k: options.pop(k) for k in _RUN if k in options}
    return prepare_config(PrepareConfig(str(source), **options), out, **run)
