"""The lessons that need no trained model: permutation, scaling, parallel.

Each runs once at size "tiny" through `seqlab.studies.lessons.run_lesson`; the tests check the files it writes
and the quantities it measured against the lecture's claims (report/slides, SA(PX) = P SA(X), the
d_k = 20 softmax example, saturation without 1/sqrt(d_k)) and against second computations (autograd
for the softmax Jacobian, exact power laws for the growth fit). Timings are checked for shape and sign
only, never for speed.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from lesson_helpers import check_lesson_files, run_tiny, tiny_lesson_fixture

from seqlab.models.attention import stable_softmax
from seqlab.studies.lessons.common import LessonResult
from seqlab.studies.lessons.parallel import MODELS, crossover, growth_exponent
from seqlab.studies.lessons.parallel import SIZES as PARALLEL_SIZES
from seqlab.studies.lessons.permutation import VARIANTS, words
from seqlab.studies.lessons.scaling import DIMS, lecture_example, softmax_jacobian_norm

permutation = tiny_lesson_fixture("permutation")
scaling = tiny_lesson_fixture("scaling")


@pytest.fixture(scope="module")
def parallel(tmp_path_factory: pytest.TempPathFactory) -> tuple[LessonResult, Path]:
    threads = torch.get_num_threads()
    result = run_tiny("parallel", tmp_path_factory)
    assert torch.get_num_threads() == threads  # the lesson pins its own threads and restores the caller's
    return result


@pytest.mark.parametrize("name", ["permutation", "scaling", "parallel"])
def test_files(name: str, request: pytest.FixtureRequest) -> None:
    result, out = request.getfixturevalue(name)
    check_lesson_files(result, out, name)


def test_words_are_split_like_the_slide() -> None:
    assert words("Send the report before the slides.") == ["Send", "the", "report", "before", "the", "slides", "."]


def test_permutation_report_vector(permutation: tuple[LessonResult, Path]) -> None:
    result, _ = permutation
    m = result.measured
    assert [r["position"] for r in result.rows] == [label for label, _, _ in VARIANTS]
    # no positions, no mask: the same vector, just in another row (slide "A sequence needs order")
    assert m["max_abs_diff"]["none"] <= 1e-6
    assert m["l2_diff"]["none"] <= 1e-6
    row = result.rows[0]
    assert (row["report_row_s1"], row["report_row_s2"]) == (2, 5)
    for label, _, _ in VARIANTS[1:]:  # every position kind, and the causal mask alone
        assert m["l2_diff"][label] > 1e-3, label
        assert m["relative_diff"][label] > 1e-3, label


def test_permutation_equivariance(permutation: tuple[LessonResult, Path]) -> None:
    eq = permutation[0].measured["equivariance_error"]
    assert eq["none"] <= 1e-5  # SA(PX) = P SA(X) up to float32 rounding
    assert all(eq[label] > 1e-3 for label, _, _ in VARIANTS[1:])


def test_permutation_paragraph_has_the_numbers(permutation: tuple[LessonResult, Path]) -> None:
    result, _ = permutation
    assert f"{result.measured['max_abs_diff']['none']:.1e}" in result.paragraph
    assert f"rope {result.measured['l2_diff']['rope']:.3g}" in result.paragraph


def test_softmax_jacobian_norm_matches_autograd() -> None:
    gen = torch.Generator().manual_seed(0)
    for scale in (0.1, 1.0, 30.0):  # near-uniform, moderate, saturated
        s = scale * torch.randn(7, generator=gen, dtype=torch.float64)
        jac = torch.autograd.functional.jacobian(lambda v: stable_softmax(v), s)  # (7, 7): d a_i / d s_j
        torch.testing.assert_close(softmax_jacobian_norm(stable_softmax(s)), torch.linalg.norm(jac))


def test_lecture_example_d20() -> None:
    ex = lecture_example(20)  # slide: [0, sqrt 20] -> [1.1%, 98.9%]; divided by sqrt 20 -> [26.9%, 73.1%]
    assert [round(100 * a, 1) for a in ex["unscaled"]] == [1.1, 98.9]
    assert [round(100 * a, 1) for a in ex["scaled"]] == [26.9, 73.1]
    assert ex["scaled"][1] == pytest.approx(1 / (1 + math.exp(-1)))  # the logistic function at gap 1


def test_scaling_saturates_without_division(scaling: tuple[LessonResult, Path]) -> None:
    result, _ = scaling
    assert [r["d_k"] for r in result.rows] == list(DIMS) and DIMS[-1] == 512
    raw = [r["max_weight_unscaled"] for r in result.rows]
    scaled = [r["max_weight_scaled"] for r in result.rows]
    assert all(b > a for a, b in zip(raw, raw[1:]))  # grows with d_k ...
    assert raw[-1] > 0.9  # ... toward 1
    assert max(scaled) - min(scaled) < 0.1  # flat with 1/sqrt(d_k)
    ent = [r["entropy_unscaled"] for r in result.rows]
    assert all(b < a for a, b in zip(ent, ent[1:])) and ent[-1] < 0.5
    jac = result.rows[-1]
    assert jac["jacobian_norm_unscaled"] < 0.5 * jac["jacobian_norm_scaled"]  # saturated: small gradients
    for r in result.rows:  # Var(q.k) = d_k (slide); with the division the spread is 1
        assert r["score_std_unscaled"] == pytest.approx(math.sqrt(r["d_k"]), rel=0.15)
        assert r["score_std_scaled"] == pytest.approx(1.0, rel=0.15)


def test_scaling_paragraph_has_the_example(scaling: tuple[LessonResult, Path]) -> None:
    result, _ = scaling
    assert "[1.1%, 98.9%]" in result.paragraph and "[26.9%, 73.1%]" in result.paragraph
    assert f"{result.rows[-1]['max_weight_unscaled']:.3f}" in result.paragraph
    assert result.measured["lecture_example_d20"] == lecture_example(20)


def test_parallel_table_is_complete(parallel: tuple[LessonResult, Path]) -> None:
    result, _ = parallel
    lengths = PARALLEL_SIZES["tiny"]["lengths"]
    assert [r["L"] for r in result.rows] == list(lengths)
    for row in result.rows:
        for label in MODELS:
            assert row[f"{label} ms"] > 0, (row["L"], label)
    ms = result.measured["ms"]
    assert set(ms) == set(MODELS)
    assert all(ms[label][str(n)] > 0 for label in MODELS for n in lengths)
    assert set(result.measured["exponent_long"]) == set(MODELS)
    assert set(result.measured["crossover"]) == set(MODELS) - {"attention"}


def test_growth_exponent_recovers_a_power_law() -> None:
    lengths = [64, 128, 256, 512]
    assert growth_exponent(lengths, [3e-4 * n**2 for n in lengths]) == pytest.approx(2.0)
    assert growth_exponent(lengths, [0.5 * n for n in lengths]) == pytest.approx(1.0)


def test_crossover_is_where_attention_stays_slower() -> None:
    lengths = [1, 2, 4, 8]
    assert crossover(lengths, [1, 2, 9, 20], [3, 3, 3, 3]) == 4
    assert crossover(lengths, [1, 5, 2, 20], [3, 3, 3, 3]) == 8  # a noisy early crossing does not count
    assert crossover(lengths, [1, 1, 1, 1], [3, 3, 3, 3]) is None
    assert crossover(lengths, [5, 5, 5, 5], [3, 3, 3, 3]) == 1
