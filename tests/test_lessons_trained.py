"""The lessons that train models: `gradient-path` and `memory` at size tiny, and the measurements they use
checked against a second computation (fused vs explicit recurrence, scan vs sequential minGRU, finite
differences, batched vs one-probe-at-a-time recall, a model that always writes "0")."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lesson_helpers import check_lesson_files, tiny_lesson_fixture
from torch import nn

from seqlab.config import ModelConfig
from seqlab.data.prepare.tokenizer_fit import fit_tokenizer
from seqlab.data.synthetic.generator import memory_email, memory_emails
from seqlab.models import build_model
from seqlab.studies.lessons.common import LessonResult
from seqlab.studies.lessons.gradient_path import decay_stats, gradient_profile, table_distances
from seqlab.studies.lessons.memory import SIZES, probe_tokens, recall_accuracy, window_coverage
from seqlab.studies.lessons.trained import ARCHS, ATTENTION

# ---------------------------------------------------------------- gradient-path


gradient_lesson = tiny_lesson_fixture("gradient-path")
memory_lesson = tiny_lesson_fixture("memory")


@pytest.mark.parametrize("name,fixture", [("gradient-path", "gradient_lesson"), ("memory", "memory_lesson")])
def test_files(name: str, fixture: str, request: pytest.FixtureRequest) -> None:
    result, out = request.getfixturevalue(fixture)
    check_lesson_files(result, out, name, trained=True)


def test_gradient_path_table(gradient_lesson: tuple[LessonResult, Path]) -> None:
    result, _ = gradient_lesson
    L = result.measured["L"]
    assert [r["d"] for r in result.rows] == table_distances(L) == [1, 2, 4, 8, 16, 31]
    assert set(result.rows[0]) == {"d", *ARCHS, *(f"{a}_init" for a in ARCHS)}
    for kind in ("trained", "init"):
        for arch in ARCHS:
            norms = result.measured["norms"][kind][arch]
            assert len(norms) == L
            assert all(math.isfinite(v) and v > 0 for v in norms), (kind, arch)


def test_gradient_path_rnn_decays_attention_does_not(gradient_lesson: tuple[LessonResult, Path]) -> None:
    result, _ = gradient_lesson
    init = result.measured["norms"]["init"]
    assert init["rnn"][-1] < init["rnn"][1]  # the product of L-2 Jacobians shrinks
    stats = result.measured["stats"]["init"]
    # attention's far gradient is within a modest factor of its near one; the RNN's is orders below
    assert stats[ATTENTION]["ratio_max_to_1"] > 1e4 * stats["rnn"]["ratio_max_to_1"]
    assert stats["rnn"]["slope_ln_per_token"] < stats[ATTENTION]["slope_ln_per_token"]
    assert 0.1 < stats[ATTENTION]["ratio_max_to_1"] < 10


def _tiny_model(mixer: str, pos: str = "none") -> nn.Module:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=40, block_size=16, mixer=mixer, n_layer=2, n_embd=16, n_head=2, pos=pos,
                      mlp_ratio=2)
    return build_model(cfg).double().eval()


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 40, (3, 12), generator=g), torch.randint(0, 40, (3, 12), generator=g)


@pytest.mark.parametrize("mixer", ["rnn", "gru"])
def test_gradient_profile_fused_equals_explicit(mixer: str) -> None:
    model, (x, y) = _tiny_model(mixer), _batch()
    fused = gradient_profile(model, x, y)
    for block in model.blocks:
        block.mixer.force_explicit = True  # the gate-by-gate loop instead of torch.nn.RNN/GRU
    explicit = gradient_profile(model, x, y)
    torch.testing.assert_close(fused, explicit, rtol=1e-9, atol=1e-12)


def test_gradient_profile_mingru_scan_equals_sequential() -> None:
    model, (x, y) = _tiny_model("mingru"), _batch()
    scan = gradient_profile(model, x, y)
    for block in model.blocks:
        block.mixer.mode = "sequential"
    torch.testing.assert_close(scan, gradient_profile(model, x, y), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("mixer,pos", [("rnn", "none"), ("attention", "rope")])
def test_gradient_profile_matches_finite_differences(mixer: str, pos: str) -> None:
    """Moving x_s by eps along a unit direction changes the loss by about eps * (gradient . direction);
    along the gradient itself that is eps * ||gradient||, the number the profile reports."""
    model = _tiny_model(mixer, pos)
    x, y = _batch()
    x, y = x[:1], y[:1]  # one window: the profile is then that window's own norms
    norms = gradient_profile(model, x, y)
    T = x.shape[1]
    emb = model.wte(x).detach()  # (1, T, C)

    @torch.no_grad()
    def loss_with(shift: torch.Tensor) -> float:
        handle = model.wte.register_forward_hook(lambda m, i, o: o + shift)
        try:
            logits, _ = model(x)
        finally:
            handle.remove()
        return float(nn.functional.cross_entropy(logits[:, -1], y[:, -1]))

    for d in (0, 1, 5):
        s = T - 1 - d
        # the gradient's direction at x_s, from autograd on a leaf (independent of the hook in the lesson)
        leaf = emb.clone().requires_grad_(True)
        handle = model.wte.register_forward_hook(lambda m, i, o, leaf=leaf: leaf)
        try:
            logits, _ = model(x)
        finally:
            handle.remove()
        (g,) = torch.autograd.grad(nn.functional.cross_entropy(logits[:, -1], y[:, -1]), leaf)
        direction = torch.zeros_like(emb)
        direction[0, s] = g[0, s] / g[0, s].norm()
        eps = 1e-6
        slope = (loss_with(eps * direction) - loss_with(-eps * direction)) / (2 * eps)
        assert slope == pytest.approx(float(norms[d]), rel=1e-5)


def test_decay_stats_of_a_geometric_sequence() -> None:
    norms = [5.0] + [2.0 * 0.5**d for d in range(1, 20)]
    stats = decay_stats(norms)
    assert stats["factor_per_token"] == pytest.approx(0.5)
    assert stats["slope_ln_per_token"] == pytest.approx(math.log(0.5))
    assert stats["ratio_max_to_1"] == pytest.approx(0.5**18)


# ---------------------------------------------------------------- memory


def test_memory_accuracies(memory_lesson: tuple[LessonResult, Path]) -> None:
    result, _ = memory_lesson
    distances = SIZES["tiny"].eval_distances
    assert [r["d_words"] for r in result.rows] == list(distances)
    for key in ("accuracy", "whole_reference"):
        table = result.measured[key]
        assert set(table) == set(ARCHS)
        for arch in ARCHS:
            assert set(table[arch]) == {str(d) for d in distances}
            assert all(0.0 <= v <= 1.0 for v in table[arch].values()), (key, arch)
    for row in result.rows:
        assert all(0.0 <= row[a] <= 1.0 for a in ARCHS)
    # the three training distances fit attention's 128-token window; d = 25 words (~160 bytes) does not
    assert [r["in_window"] for r in result.rows] == [1.0, 1.0, 1.0, 0.0]
    assert result.measured["chance"] == 0.1
    assert "outside the window" in result.paragraph


@pytest.mark.parametrize("window", [64, 128, 192])
def test_window_coverage_counts_bytes_from_the_first_copy(window: int) -> None:
    """Inside the window <=> the bytes from the first copy up to the last digit's input fit in it."""
    tok = fit_tokenizer("byte", [])
    probes = [m for d in (5, 12, 20, 30) for m in memory_emails(6, d, seed=4)]
    expected = [len(m.text[m.text.index(m.ref) : m.recall_at + len(m.ref) - 1].encode()) <= window for m in probes]
    assert 0 < sum(expected) < len(probes)  # some probes inside the window, some outside
    assert window_coverage(tok, probes, window) == pytest.approx(sum(expected) / len(probes))


@settings(max_examples=25, deadline=None)
@given(distance=st.integers(5, 60), seed=st.integers(0, 10_000))
def test_probe_tokens_point_at_the_recalled_digits(distance: int, seed: int) -> None:
    tok = fit_tokenizer("byte", [])
    mem = memory_email(random.Random(seed), distance)
    ids, digits = probe_tokens(tok, mem)
    assert ids[0] == tok.bos_id and tok.decode(ids) == mem.prompt + mem.ref
    assert "".join(tok.decode([ids[i]]) for i in digits) == "".join(c for c in mem.ref if c.isdigit())
    assert digits[-1] == len(ids) - 1  # references end in a digit


class _AlwaysZero(nn.Module):
    """A stand-in model whose most likely next token is always the byte "0"."""

    def forward(self, idx: torch.Tensor) -> tuple[torch.Tensor, None]:
        logits = torch.zeros(*idx.shape, 259)
        logits[..., ord("0")] = 1.0
        return logits, None


def test_recall_accuracy_of_a_model_that_always_writes_zero() -> None:
    tok = fit_tokenizer("byte", [])
    probes = memory_emails(30, 12, seed=5)
    digits = [c for m in probes for c in m.ref if c.isdigit()]
    acc, whole = recall_accuracy(_AlwaysZero(), tok, probes, window=None)
    assert acc == pytest.approx(digits.count("0") / len(digits))
    assert whole == sum(all(c == "0" for c in m.ref if c.isdigit()) for m in probes) / len(probes)


@pytest.mark.parametrize("mixer,pos,window", [("gru", "none", None), ("attention", "rope", 48)])
def test_recall_accuracy_batched_equals_one_probe_at_a_time(mixer: str, pos: str, window: int | None) -> None:
    """Right padding and the window cut do not change what each probe's digits are scored against."""
    tok = fit_tokenizer("byte", [])
    torch.manual_seed(3)
    model = build_model(ModelConfig(vocab_size=259, block_size=64, mixer=mixer, pos=pos, n_layer=1, n_embd=16,
                                    n_head=2)).eval()
    probes = memory_emails(4, 5, seed=1) + memory_emails(4, 15, seed=1)
    hits = []
    for mem in probes:
        ids, digits = probe_tokens(tok, mem)
        inputs = ids[: digits[-1]]
        cut = max(0, len(inputs) - window) if window else 0
        logits, _ = model(torch.tensor([inputs[cut:]]))  # (1, T, V), no padding
        hits.append([int(logits[0, i - 1 - cut].argmax()) == ids[i] for i in digits])
    acc, whole = recall_accuracy(model, tok, probes, window)
    assert acc == pytest.approx(sum(map(sum, hits)) / sum(map(len, hits)))
    assert whole == pytest.approx(sum(all(h) for h in hits) / len(hits))
