"""`seqlab bench --only prepare`'s measurement (seqlab/bench/prepare_speed.py) on a tiny corpus: it runs from
the package (each `prepare` a `python -m seqlab.bench.prepare_speed --child` process, whatever the working
folder), and its rows and figures have the shape `seqlab bench` reads. No wall-clock thresholds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from seqlab.bench import prepare_speed


def test_prepare_speed_runs_from_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no source checkout around: nothing is found by a script path
    result = prepare_speed.run(messages=100, workers=2, cache=tmp_path / "cache")
    names = [r["name"] for r in result["rows"]]
    assert names == ["mbox-byte-10", "mbox-byte-30", "mbox-byte-100", "mbox-byte-10-w1", "tree-byte-10",
                     "enron-byte-10", "mbox-bpe-10", "long-byte-10"]
    assert all(r["kept"] > 0 and r["mb_per_s"] > 0 for r in result["rows"])
    assert result["speedup_vs_1_worker"] > 0
    figures = {f["name"]: f for f in result["figures"]}
    assert figures["prepare mbox 100 msgs"]["goal"] == f">= {prepare_speed.GOAL_MB_PER_S:g}"
    assert "prepare mbox 100 msgs" in prepare_speed.report(result)
    update = figures["prepare --update of 1% new mail / full prepare, 100 msgs"]
    assert result["update"]["added"] == 1 and result["update"]["seen"] == 1 and update["value"] > 0
    json.dumps(result)  # what the section writes to prepare.json
    assert not (tmp_path / "cache" / "runs" / "mbox-byte-10").exists()  # each run's DATA_DIR is removed


def test_the_module_never_loads_torch(tmp_path: Path) -> None:
    """What each measured child imports before `prepare`: no torch, so its memory is prepare's own."""
    code = "import sys, seqlab.bench.prepare_speed as p; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path)
    assert out.stdout.strip() == "False"
