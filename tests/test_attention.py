"""The lecture's attention claims, executable: worked numbers, stable softmax, masks, both paths,
permutation equivariance, our MultiHeadAttention against torch.nn.MultiheadAttention, cross-attention,
the key/value cache and the attention recorder. Incremental vs full, shared by every mixer and position kind:
test_model_contract.py."""

from __future__ import annotations

import importlib
import math
import pkgutil
import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seqlab.models.attention import (
    KVCache,
    MultiHeadAttention,
    attention,
    causal_mask,
    document_mask,
    stable_softmax,
)
from seqlab.models.recorder import active_recorder, record_attention

NEG = float("-inf")


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


# ------------------------------------------------------------------ the module by its name


def test_attention_module_is_reachable_by_its_name() -> None:
    # the package must not re-export the function `attention` over the module of the same name
    import seqlab.models.attention as A

    assert isinstance(A, types.ModuleType) and A.__name__ == "seqlab.models.attention"
    assert A.attention is attention and callable(A.attention)
    import seqlab.models

    for info in pkgutil.iter_modules(seqlab.models.__path__):  # every submodule, not only attention
        module = importlib.import_module(f"seqlab.models.{info.name}")
        assert getattr(seqlab.models, info.name) is module, info.name


# ------------------------------------------------------------------ the lecture's worked numbers


@pytest.mark.parametrize("need_weights", [True, False])
def test_soft_lookup_example(need_weights: bool) -> None:
    # slide "One weighted combination uses values, not token IDs": query [1], keys [0], [log 2], [log 3]
    q = torch.tensor([[1.0]])
    k = torch.tensor([[0.0], [math.log(2)], [math.log(3)]])
    v = torch.tensor([[1.0, 0.0], [0.0, 2.0], [2.0, 2.0]])
    y, a = attention(q, k, v, need_weights=need_weights)
    torch.testing.assert_close(y, torch.tensor([[7 / 6, 5 / 3]]))
    if need_weights:
        torch.testing.assert_close(a, torch.tensor([[1 / 6, 2 / 6, 3 / 6]]))
    else:
        assert a is None


def test_scaling_by_sqrt_dk_example() -> None:
    # slide "Divide by sqrt(d_k)": d_k = 20, scores [0, sqrt 20] -> [1.1%, 98.9%]; scaled -> [26.9%, 73.1%]
    raw = stable_softmax(torch.tensor([0.0, math.sqrt(20)]))
    assert [round(100 * w, 1) for w in raw.tolist()] == [1.1, 98.9]
    scaled = stable_softmax(torch.tensor([0.0, math.sqrt(20)]) / math.sqrt(20))
    assert [round(100 * w, 1) for w in scaled.tolist()] == [26.9, 73.1]
    # attention() applies the division itself: q . k = [0, sqrt 20] with d_k = 20
    q = torch.ones(1, 20)
    k = torch.stack([torch.zeros(20), torch.ones(20) / math.sqrt(20)])
    _, a = attention(q, k, torch.eye(2), need_weights=True)
    assert [round(100 * w, 1) for w in a[0].tolist()] == [26.9, 73.1]


def test_stable_softmax_large_scores() -> None:
    s = torch.tensor([[1e4, 1e4 - 1.0, 0.0], [-1e4, 2e4, 3.0]])
    assert torch.isinf(torch.exp(s)).any()  # the naive formula overflows here
    a = stable_softmax(s)
    assert torch.isfinite(a).all()
    torch.testing.assert_close(a, torch.softmax(s, dim=-1))
    x = torch.randn(4, 7, 9, dtype=torch.float64)
    for dim in (0, 1, -1):
        torch.testing.assert_close(stable_softmax(x, dim=dim), torch.softmax(x, dim=dim))


def test_fully_masked_row_gives_zeros_and_finite_gradients() -> None:
    s = torch.tensor([[NEG, NEG, NEG], [0.0, 1.0, NEG]], requires_grad=True)
    a = stable_softmax(s)
    assert a[0].tolist() == [0.0, 0.0, 0.0]
    torch.testing.assert_close(a[1], torch.softmax(torch.tensor([0.0, 1.0, NEG]), dim=-1))
    (a * torch.randn_like(a)).sum().backward()
    assert torch.isfinite(s.grad).all()


# ------------------------------------------------------------------ masks


def test_causal_mask_values() -> None:
    m = causal_mask(5)
    assert m.shape == (5, 5)
    for i in range(5):
        for j in range(5):
            assert m[i, j].item() == (0.0 if j <= i else NEG)
    # the cache case: rows of queries at positions 3, 4 are the last rows of the square mask
    assert torch.equal(causal_mask(2, offset=3), causal_mask(5)[3:])


def test_document_mask_is_block_diagonal_causal() -> None:
    doc = torch.tensor([[0, 0, 1, 1, 1, 2], [5, 5, 5, 5, 7, 7]])
    m = document_mask(doc)
    assert m.shape == (2, 1, 6, 6)
    for b in range(2):
        for i in range(6):
            for j in range(6):
                allowed = j <= i and doc[b, i] == doc[b, j]
                assert m[b, 0, i, j].item() == (0.0 if allowed else NEG)


# ------------------------------------------------------------------ explicit path == fused path


def _masks() -> dict[str, torch.Tensor | None]:
    bias = torch.randn(3, 5, 7)  # per-head float bias, (H, Lq, Lk)
    holes = torch.where(torch.rand(2, 1, 5, 7) < 0.3, NEG, 0.0)
    holes[..., 0] = 0.0  # keep one key per row
    dead = torch.zeros(5, 7)
    dead[2] = NEG  # one fully masked row
    dead[4, 3:] = NEG
    return {"none": None, "bias": bias, "holes": holes, "causal_offset": causal_mask(5, offset=2), "dead_row": dead}


@pytest.mark.parametrize("name", list(_masks()))
def test_explicit_equals_fused(name: str) -> None:
    mask = _masks()[name]
    q = torch.randn(2, 3, 5, 8, requires_grad=True)  # (B, H, Lq, D)
    k = torch.randn(2, 3, 7, 8, requires_grad=True)  # (B, H, Lk, D)
    v = torch.randn(2, 3, 7, 6, requires_grad=True)  # (B, H, Lk, Dv)
    y_fast, none = attention(q, k, v, mask=mask)
    y_slow, a = attention(q, k, v, mask=mask, need_weights=True)
    assert none is None and a is not None and a.shape == (2, 3, 5, 7)
    assert torch.isfinite(y_fast).all()
    torch.testing.assert_close(y_fast, y_slow, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(y_fast)
    grads_fast = torch.autograd.grad(y_fast, (q, k, v), g)
    grads_slow = torch.autograd.grad(y_slow, (q, k, v), g)
    for gf, gs in zip(grads_fast, grads_slow):
        assert torch.isfinite(gf).all()
        torch.testing.assert_close(gf, gs, atol=1e-5, rtol=1e-5)
    if name == "dead_row":
        assert y_fast[:, :, 2].abs().max().item() == 0.0 and a[:, :, 2].abs().max().item() == 0.0


def test_is_causal_equals_causal_mask() -> None:
    q, k, v = torch.randn(3, 2, 6, 4), torch.randn(3, 2, 6, 4), torch.randn(3, 2, 6, 4)
    ref, a = attention(q, k, v, mask=causal_mask(6), need_weights=True)
    for need in (False, True):
        y, _ = attention(q, k, v, is_causal=True, need_weights=need)
        torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-5)
    assert torch.all(a.triu(diagonal=1) == 0)
    with pytest.raises(ValueError, match="is_causal"):
        attention(q, k[:, :, :4], v[:, :, :4], is_causal=True)


def test_fast_path_taken_without_weights_and_causal_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict] = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    mha = MultiHeadAttention(16, 2).eval()
    x = torch.randn(2, 5, 16)
    mha(x)
    assert len(calls) == 1 and calls[0]["is_causal"] is True and calls[0]["attn_mask"] is None
    with record_attention():
        mha(x)
    assert len(calls) == 1  # recording takes the explicit path


# ------------------------------------------------------------------ permutation equivariance


def test_self_attention_is_permutation_equivariant_without_mask() -> None:
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(1, 9, 16)
    y, _ = mha(x, causal=False)
    for seed in range(3):
        perm = torch.randperm(9, generator=torch.Generator().manual_seed(seed))
        y_perm, _ = mha(x[:, perm], causal=False)
        torch.testing.assert_close(y_perm, y[:, perm], atol=1e-6, rtol=1e-5)  # SA(PX) = P SA(X)
    perm = torch.tensor([3, 0, 8, 1, 5, 2, 7, 4, 6])
    y_causal, _ = mha(x, causal=True)
    y_causal_perm, _ = mha(x[:, perm], causal=True)
    assert not torch.allclose(y_causal_perm, y_causal[:, perm], atol=1e-4)  # the mask breaks it


# ------------------------------------------------------------------ against torch.nn.MultiheadAttention


def _pair(n_embd: int, n_head: int, bias: bool,
          kdim: int | None = None) -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    ref = nn.MultiheadAttention(n_embd, n_head, bias=bias, batch_first=True, kdim=kdim, vdim=kdim)
    ours = MultiHeadAttention(n_embd, n_head, bias=bias, kdim=kdim)
    with torch.no_grad():
        if kdim is None:  # torch stacks [W_Q; W_K; W_V] in one (3C, C) matrix
            ours.q_proj.weight.copy_(ref.in_proj_weight[:n_embd])
            ours.kv_proj.weight.copy_(ref.in_proj_weight[n_embd:])
        else:
            ours.q_proj.weight.copy_(ref.q_proj_weight)
            ours.kv_proj.weight.copy_(torch.cat([ref.k_proj_weight, ref.v_proj_weight]))
        ours.out_proj.weight.copy_(ref.out_proj.weight)
        if bias:
            ref.in_proj_bias.normal_()
            ref.out_proj.bias.normal_()
            ours.q_proj.bias.copy_(ref.in_proj_bias[:n_embd])
            ours.kv_proj.bias.copy_(ref.in_proj_bias[n_embd:])
            ours.out_proj.bias.copy_(ref.out_proj.bias)
    return ours.eval(), ref.eval()


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_matches_torch(bias: bool, causal: bool) -> None:
    ours, ref = _pair(24, 3, bias)
    x = torch.randn(2, 7, 24)
    mask = causal_mask(7) if causal else None
    y_ref, a_ref = ref(x, x, x, attn_mask=mask, need_weights=True, average_attn_weights=False)
    with record_attention() as rec:
        y, _ = ours(x, causal=causal)
    torch.testing.assert_close(y, y_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rec.get(-1), a_ref, atol=1e-5, rtol=1e-5)  # (B, H, L, L)
    y_fast, _ = ours(x, causal=causal)  # fused path, same numbers
    torch.testing.assert_close(y_fast, y_ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_cross_attention_matches_torch(bias: bool, padded: bool) -> None:
    ours, ref = _pair(16, 2, bias, kdim=12)
    x, ctx = torch.randn(2, 3, 16), torch.randn(2, 7, 12)  # Lq = 3 queries, Lc = 7 context rows of width 12
    keep = torch.ones(2, 7, dtype=torch.bool)
    if padded:
        keep[0, 5:] = False
    y_ref, a_ref = ref(x, ctx, ctx, key_padding_mask=~keep if padded else None, need_weights=True,
                       average_attn_weights=False)
    with record_attention() as rec:
        y, state = ours(x, context=ctx, context_mask=keep if padded else None)
    torch.testing.assert_close(y, y_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rec.get(-1, kind="cross"), a_ref, atol=1e-5, rtol=1e-5)
    y_fast, _ = ours(x, context=ctx, context_mask=keep if padded else None)
    torch.testing.assert_close(y_fast, y_ref, atol=1e-5, rtol=1e-5)
    y_cached, _ = ours(x, state=state)  # context keys/values reused from the state
    torch.testing.assert_close(y_cached, y_ref, atol=1e-5, rtol=1e-5)


def test_cross_attention_shapes_and_self_as_cross() -> None:
    mha = MultiHeadAttention(16, 4).eval()
    x, ctx = torch.randn(2, 3, 16), torch.randn(2, 11, 16)
    with record_attention() as rec:
        y, _ = mha(x, context=ctx)
    assert y.shape == (2, 3, 16)  # one output row per query: Lq x d_v
    assert rec.get(-1, kind="cross").shape == (2, 4, 3, 11)  # Lq x Lc weights per head
    torch.testing.assert_close(rec.get(-1, kind="cross").sum(-1), torch.ones(2, 4, 3))
    # slide: self-attention is the case C = X (non-causal)
    x = torch.randn(2, 6, 16)
    torch.testing.assert_close(mha(x, causal=False)[0], mha(x, context=x)[0], atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="kdim"):
        MultiHeadAttention(16, 4, kdim=8)(x)


def test_single_head_is_the_lecture_equation() -> None:
    mha = MultiHeadAttention(8, 1).eval()
    x = torch.randn(1, 5, 8)
    wq, (wk, wv) = mha.q_proj.weight.T, mha.kv_proj.weight.T.split(8, dim=1)
    q, k, v = x[0] @ wq, x[0] @ wk, x[0] @ wv  # Q = X W_Q, K = X W_K, V = X W_V
    a = torch.softmax(q @ k.T / math.sqrt(8) + causal_mask(5), dim=-1)
    torch.testing.assert_close(mha(x)[0][0], (a @ v) @ mha.out_proj.weight.T, atol=1e-6, rtol=1e-5)


# ------------------------------------------------------------------ key/value cache and recorder


def test_kv_cache_grows_by_doubling_and_clone_is_independent() -> None:
    cache = KVCache(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2), 1)
    capacities = []
    for i in range(2, 18):
        k, v = cache.append(torch.full((1, 1, 1, 2), float(i)), torch.full((1, 1, 1, 2), -float(i)))
        capacities.append(cache.k.size(2))
        assert k.shape == (1, 1, i, 2) and k[0, 0, -1, 0].item() == i and v[0, 0, -1, 0].item() == -i
    assert sorted(set(capacities)) == [2, 4, 8, 16, 32]  # O(log n) reallocations
    branch = cache.clone()
    cache.append(torch.full((1, 1, 1, 2), 99.0), torch.zeros(1, 1, 1, 2))
    branch.append(torch.full((1, 1, 1, 2), 42.0), torch.zeros(1, 1, 1, 2))
    assert cache.k[0, 0, 17, 0].item() == 99.0 and branch.k[0, 0, 17, 0].item() == 42.0


def test_recorder_only_records_inside_the_block() -> None:
    mha = MultiHeadAttention(16, 4).eval()
    mha.layer = 3
    x = torch.randn(2, 5, 16)
    assert active_recorder() is None
    with record_attention() as rec:
        y_rec, _ = mha(x)
    y, _ = mha(x)
    assert active_recorder() is None and len(rec.records) == 1
    torch.testing.assert_close(y, y_rec, atol=1e-5, rtol=1e-5)  # same return type, same values
    a = rec.head(3, head=1, batch=1)
    assert a.shape == (5, 5) and torch.all(a.triu(1) == 0)
    torch.testing.assert_close(a.sum(-1), torch.ones(5))
    assert rec.layers() == [3]
    with pytest.raises(KeyError):
        rec.get(0)
