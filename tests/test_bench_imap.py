"""The IMAP rows of `seqlab bench --only prepare` (seqlab/bench/imap_speed.py) on a tiny corpus.

Against a real Dovecot (skipped without one, as tests/test_imap.py): the same mail prepared from the mbox and
from the server keeps the same emails (imap_speed checks it and fails otherwise), and the rows carry the ratio
of the two measured wall times. Without Dovecot the section is one "skipped" row, not a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from imap_server import require_dovecot

from seqlab.bench import imap_speed


def test_imap_rows_compare_the_same_mail_from_mbox_and_server(tmp_path: Path) -> None:
    require_dovecot()
    old = os.umask(0o077)  # as in `seqlab bench`, after prepare made its private files: the server's still work
    try:
        result = imap_speed.run([20, 60], workers=1, cache=tmp_path / "cache")
    finally:
        os.umask(old)
    assert "failed" not in result, result
    pairs = result["pairs"]
    assert [p["messages"] for p in pairs] == [20, 60]
    for p in pairs:
        assert p["imap"]["kept"] == p["mbox"]["kept"] > 0 and p["imap"]["raw_bytes"] == p["mbox"]["raw_bytes"]
        assert p["ratio"] == p["imap"]["wall_s"] / p["mbox"]["wall_s"]
    rows = imap_speed.rows(result)
    assert rows[0]["value"] == pairs[-1]["ratio"] and rows[0]["goal"] == "<= 2"
    assert rows[1]["value"] == pairs[-1]["imap"]["tree_peak_rss_bytes"] / pairs[-1]["mbox"]["tree_peak_rss_bytes"]
    assert rows[2]["value"] == result["imap_growth_bytes_per_email"]
    assert f"{pairs[-1]['ratio']:6.2f}" in imap_speed.report(result)


def test_without_dovecot_the_rows_say_skipped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(imap_speed, "missing_tools", lambda: "dovecot is not installed")
    result = imap_speed.run([20], cache=tmp_path / "cache")
    (row,) = imap_speed.rows(result)
    assert row["unit"] == "skipped" and row["name"] == "IMAP prepare skipped: dovecot not installed"
    assert not (tmp_path / "cache").exists()  # nothing written, nothing started
