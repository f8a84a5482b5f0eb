"""`PrepareConfig`: prepare's settings typed and checked once, frozen, and saved in meta.json under `prepare`,
so a DATA_DIR says how it was made; a DATA_DIR written before the key existed still loads."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from seqlab.data.prepare.options import PrepareConfig
from seqlab.data.prepare.pipeline import prepare
from seqlab.data.store import TokenStore
from seqlab.errors import UserError


def test_meta_json_records_the_config(tmp_path: Path) -> None:
    config = PrepareConfig("synthetic", count=30, seed=3, split=(0.8, 0.1, 0.1), split_by="thread", mask_pii=True)
    meta = prepare(config, tmp_path / "d", workers=1, progress=False)
    saved = json.loads((tmp_path / "d" / "meta.json").read_text())["prepare"]
    assert saved == meta["prepare"] == config.as_meta()
    assert saved["source"] == "synthetic" and saved["seed"] == 3 and saved["split_by"] == "thread"
    assert PrepareConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()}) == config


def test_the_config_is_frozen_and_checked() -> None:
    config = PrepareConfig("synthetic")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seed = 1  # type: ignore[misc]
    assert config.split_by == "thread" and PrepareConfig("x", senders=["a@b.example"]).split_by == "date"
    with pytest.raises(UserError, match="--split-by must be thread or date"):
        PrepareConfig("synthetic", split_by="month")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="--sender 'Justin' holds no email address"):
        PrepareConfig("synthetic", senders=["Justin"])


def test_a_data_dir_without_the_config_still_loads(tiny_data_dir: Path, tmp_path: Path) -> None:
    old = tmp_path / "old"
    old.mkdir()
    for f in tiny_data_dir.iterdir():
        (old / f.name).write_bytes(f.read_bytes())
    meta = json.loads((old / "meta.json").read_text())
    meta.pop("prepare")
    (old / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    assert TokenStore(old, "train").num_emails == meta["splits"]["train"]["emails"]
