"""ExactMatch across coverages: the Wilson interval against its defining inequality, the coverage table
against scoring at each threshold by hand, and `seqlab eval --coverages --plot` end to end."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from seqlab.cli.main import main
from seqlab.evaluation.exact_match import (
    Proposal,
    coverage_table,
    phrase_coverage_table,
    score_proposals,
    threshold_for_coverage,
    wilson_interval,
)
from seqlab.options import EvalOptions


@pytest.mark.parametrize(("hits", "n"), [(0, 10), (3, 10), (10, 10), (40, 100), (1, 1), (517, 1000)])
def test_wilson_interval_bounds_solve_the_score_test(hits: int, n: int) -> None:
    """The Wilson interval is {p : (k - n p)^2 <= z^2 n p (1 - p)}: its ends make the two sides equal."""
    lo, hi = wilson_interval(hits, n)
    z = 1.959963984540054
    for p in (lo, hi):
        if 0.0 < p < 1.0:
            assert (hits - n * p) ** 2 == pytest.approx(z * z * n * p * (1 - p), rel=1e-9, abs=1e-9)
    assert lo <= hits / n <= hi
    # a bisection on the inequality finds the same lower end
    a, b = 0.0, hits / n
    for _ in range(100):
        m = (a + b) / 2
        a, b = (m, b) if (hits - n * m) ** 2 > z * z * n * m * (1 - m) else (a, m)
    assert lo == pytest.approx(b, abs=1e-9)


def test_wilson_interval_textbook_value_and_edges() -> None:
    lo, hi = wilson_interval(40, 100)
    assert (round(lo, 4), round(hi, 4)) == (0.3094, 0.4980)  # Brown, Cai & DasGupta (2001) style check
    assert wilson_interval(0, 0) is None
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def _proposals(n: int, seed: int = 0) -> list[Proposal]:
    """Random proposals: a confidence, a true continuation of 1-5 words, right more often when confident."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        conf = rng.random()
        truth = [f"w{rng.randrange(3)}" for _ in range(rng.randint(1, 5))]
        words = [w if rng.random() < conf else "x" for w in truth] if rng.random() > 0.05 else []
        out.append(Proposal(0, i, truth, words, conf if words else 0.0))
    return out


def test_coverage_table_equals_scoring_at_each_threshold() -> None:
    props = _proposals(400)
    table = coverage_table(props, (0.05, 0.1, 0.2, 0.5, 1.0))
    for row in table:
        t = threshold_for_coverage(props, row["target"])
        again = score_proposals(props, t)
        assert row["threshold"] == t and row["exact_match"] == again["exact_match"]
        assert row["coverage"] >= min(row["target"], again["coverage"])
        for n, ci in row["exact_match_ci95"].items():
            k = round(row["exact_match"][n] * row["exact_match_counts"][n])
            assert ci == list(wilson_interval(k, row["exact_match_counts"][n]))
    # showing only the surest suggestions buys precision on this data
    em1 = [r["exact_match"]["1"] for r in table]
    assert em1[0] > em1[-1]
    assert [r["shown"] for r in table] == sorted(r["shown"] for r in table)


def test_cli_eval_reports_each_coverage_and_plots(word_run_dir: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "coverage.png"
    code = main(["eval", str(word_run_dir), "--json", "--completion-emails", "6", "--positions-per-email", "4",
                 "--coverages", "0.1,0.5,1", "--plot", str(png), "--device", "cpu", "--precision", "fp32"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["precision"] == "fp32"
    rows = result["by_coverage"]
    assert [r["target"] for r in rows] == [0.1, 0.5, 1.0]
    assert result["completion_positions"] == rows[0]["positions"] > 0
    assert rows[-1]["shown"] > 0, "the model should propose words, or this test checks little"
    assert rows[-1]["exact_match"] == result["exact_match"]  # 100% coverage: threshold 0 shows every proposal
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("bad", ["0,0.5", "1.5", "a,b", ""])
def test_cli_eval_refuses_bad_coverages(word_run_dir: Path, bad: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["eval", str(word_run_dir), "--coverages", bad])
    assert exc.value.code == 2


def test_format_eval_prints_the_table_with_intervals(word_run_dir: Path) -> None:
    from seqlab.evaluation.report import evaluate_run, format_eval

    r = evaluate_run(word_run_dir, EvalOptions(split="val", completion_emails=4, positions_per_email=3,
                                               coverages=(0.2, 1.0)), device="cpu")
    text = format_eval(r)
    assert "95% Wilson interval" in text and "EM@5" in text
    assert all(math.isfinite(v) for v in (r["bpb"], r["loss"]))


def test_phrase_table_with_first_word_confidences_only_equals_the_first_word_table_at_em1() -> None:
    """Without per-word confidences every prefix stands on the first word's: EM@1 and its threshold are
    those of `coverage_table` (one gate, two computations)."""
    props = _proposals(400, seed=1)
    plain, phrase = coverage_table(props), phrase_coverage_table(props)
    for a, b in zip(plain, phrase):
        assert b["threshold"]["1"] == a["threshold"] and b["exact_match"]["1"] == a["exact_match"]["1"]
        assert b["shown"]["1"] == a["shown"] and b["exact_match_ci95"]["1"] == a["exact_match_ci95"]["1"]


def test_phrase_table_ranks_n_word_suggestions_by_their_own_probability() -> None:
    """Two positions: A is surer of its first word but its 2-word phrase is unlikely and wrong; B's phrase
    is likelier and right. At 50% coverage the first-word gate shows A (EM@2 0%), the phrase gate B (100%)."""
    a = Proposal(0, 0, ["see", "you"], ["see", "the"], 0.9, [0.9, 0.05])
    b = Proposal(1, 0, ["thanks", "a"], ["thanks", "a"], 0.6, [0.6, 0.5])
    first = coverage_table([a, b], (0.5,))[0]
    phrase = phrase_coverage_table([a, b], (0.5,))[0]
    assert first["exact_match"]["2"] == 0.0 and first["threshold"] == 0.9
    assert phrase["exact_match"]["2"] == 1.0 and phrase["threshold"]["2"] == 0.5
    assert phrase["exact_match"]["1"] == 1.0 and phrase["shown"] == {"1": 1, "2": 1, "3": 0, "4": 0, "5": 0}
    assert phrase["exact_match"]["3"] is None and phrase["threshold"]["3"] == 0.0
