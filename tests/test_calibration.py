"""Calibration: the threshold written to calibration.json reproduces its coverage when completions are scored
again from scratch, it is the highest such threshold, the file round-trips, a damaged file is a UserError,
and `seqlab calibrate` exits 0 or 2."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from seqlab.cli.main import main
from seqlab.data.store import TokenStore
from seqlab.errors import UserError
from seqlab.evaluation.calibration import CALIBRATION, calibrate_run, format_calibration, load_calibration
from seqlab.evaluation.exact_match import completion_quality
from seqlab.evaluation.scored_emails import completion_texts
from seqlab.options import CalibrateOptions
from seqlab.runs.load import load_run

EMAILS = 12


@pytest.fixture(scope="module")
def run_dir(word_run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the shared run: calibrating writes calibration.json, which other tests' servers would read."""
    return Path(shutil.copytree(word_run_dir, tmp_path_factory.mktemp("calibrated") / "run"))


@pytest.fixture(scope="module")
def calibrated(run_dir: Path, tiny_data_dir: Path) -> dict:
    return calibrate_run(run_dir, CalibrateOptions(data=tiny_data_dir, split="val", coverage=0.5, emails=EMAILS,
                                                   max_words=3))


def _rescore(run_dir: Path, data_dir: Path, threshold: float) -> dict:
    """Completions scored again from scratch at `threshold`, on the emails calibration draws."""
    model, tok, _ = load_run(run_dir, "cpu")
    texts = completion_texts(TokenStore(data_dir, "val"), tok, EMAILS, seed=0)
    return completion_quality(model, tok, texts, max_words=3, threshold=threshold, positions_per_email=2, seed=0)


def test_threshold_reproduces_the_recorded_coverage(calibrated: dict, run_dir: Path,
                                                    tiny_data_dir: Path) -> None:
    assert calibrated["shown"] > 0, "the model should propose words, or this test checks nothing"
    again = _rescore(run_dir, tiny_data_dir, calibrated["threshold"])
    assert again["coverage"] == calibrated["coverage"] >= calibrated["target_coverage"]
    assert again["exact_match"] == calibrated["exact_match"]
    assert again["positions"] == calibrated["positions"] and again["shown"] == calibrated["shown"]
    # The highest such threshold: a hair above it, the target is no longer reached.
    above = _rescore(run_dir, tiny_data_dir, math.nextafter(calibrated["threshold"], 1.0))
    assert above["coverage"] < calibrated["target_coverage"]


def test_the_file_records_the_run(calibrated: dict, run_dir: Path, tiny_data_dir: Path) -> None:
    on_disk = json.loads((run_dir / CALIBRATION).read_text())
    assert on_disk == calibrated
    assert set(on_disk["exact_match"]) == {"1", "2", "3"}
    assert on_disk["split"] == "val" and on_disk["max_words"] == 3 and on_disk["target_coverage"] == 0.5
    assert on_disk["emails"] == min(EMAILS, TokenStore(tiny_data_dir, "val").num_emails)
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")], "atomic write left a temp file"


def test_load_calibration_round_trips(calibrated: dict, run_dir: Path, tmp_path: Path) -> None:
    assert load_calibration(run_dir) == calibrated
    assert load_calibration(tmp_path) is None


@pytest.mark.parametrize("content", [b"{not json", b"[0.5]", b'{"coverage": 0.5}', b'{"threshold": 1.5}',
                                     b'{"threshold": true}', b'{"threshold": NaN}', b"\xff\xfe"])
def test_a_damaged_file_is_a_user_error_naming_it(tmp_path: Path, content: bytes) -> None:
    (tmp_path / CALIBRATION).write_bytes(content)
    with pytest.raises(UserError, match=CALIBRATION):
        load_calibration(tmp_path)


@pytest.mark.parametrize("coverage", [0.0, -0.1, 1.5, float("nan")])
def test_coverage_outside_the_unit_interval_is_refused(tmp_path: Path, coverage: float) -> None:
    with pytest.raises(UserError, match="coverage"):
        calibrate_run(tmp_path, CalibrateOptions(coverage=coverage))


def test_an_unreachable_target_is_said(calibrated: dict) -> None:
    assert "out of reach" not in format_calibration(calibrated)
    short = {**calibrated, "coverage": 0.25, "target_coverage": 0.9}
    assert "out of reach" in format_calibration(short)


def test_cli_calibrate(tiny_run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run_dir, run)  # the shared run stays as other tests expect it
    assert main(["calibrate", str(run), "--emails", "3", "--coverage", "0.4", "--max-words", "2"]) == 0
    out = capsys.readouterr().out
    assert "threshold" in out and "coverage" in out and "EM@2" in out
    assert f"wrote {run / CALIBRATION}" in out
    assert load_calibration(run)["target_coverage"] == 0.4


def _exit_code(argv: list[str]) -> int:
    """`main`'s exit code, whether it returns one or argparse exits with it."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


@pytest.mark.parametrize("args", [["--coverage", "0"], ["--coverage", "1.5"], ["--coverage", "half"],
                                  ["--emails", "0"], ["--split", "train"]])
def test_cli_calibrate_bad_options_exit_2(tiny_run_dir: Path, args: list[str],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(["calibrate", str(tiny_run_dir), *args]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "error:" in err
    assert not (tiny_run_dir / CALIBRATION).exists()


def test_cli_calibrate_bad_run_dir_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(["calibrate", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.strip() == f"seqlab: error: {tmp_path / 'missing'} is not a run folder."
    assert _exit_code(["calibrate", str(tmp_path)]) == 2  # a folder, but no checkpoint in it
    err = capsys.readouterr().err
    assert err.startswith("seqlab: error:") and err.count("\n") == 1
