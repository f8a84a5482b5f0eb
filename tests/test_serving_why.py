"""The "why?" view (`seqlab.serving.why`, `POST /v1/why`), each number checked against a second computation:
attention rows against the inspection probes' own maps and a direct recording, GRU gate openness against
the probes' gate loop over the whole text, alternatives against a softmax of the model's logits, and the
window against the engine's own cut."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from serving_helpers import ready_client

from seqlab.config import ModelConfig
from seqlab.data.tokenizer import ByteTokenizer
from seqlab.generation.decode import context_limit
from seqlab.inspection import probes
from seqlab.models import build_model
from seqlab.models.recorder import record_attention
from seqlab.runs.load import load_run
from seqlab.serving import why
from seqlab.serving.app import ServerConfig
from seqlab.serving.engine import CompletionEngine, prompt_text
from seqlab.serving.sessions import window_start

SUBJECT = "Report"
SHORT = "Hi Dana,\nCould you send"  # with the subject: 31 bytes + bos, inside the tiny model's 32 tokens
LONG = "Hi Dana,\n\nCould you send me the report before Friday? I would like to read it"


def _model(mixer: str, n_layer: int = 2, block_size: int = 32) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=ByteTokenizer().vocab_size, block_size=block_size, n_layer=n_layer, n_embd=16,
                      n_head=2, pos="rope" if mixer == "attention" else "none", mixer=mixer, mlp_ratio=2)
    return build_model(cfg).eval()


@pytest.fixture(scope="module")
def word_model(word_run_dir: Path):
    model, tok, _ = load_run(word_run_dir, device="cpu")
    return model.eval(), tok


def _logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids]))[0][0, -1].double()  # (V,)


def _check_positions(result: dict, lo: int, hi: int) -> None:
    weights = [p["weight"] for p in result["positions"]]
    assert weights == sorted(weights, reverse=True) and len(weights) == min(why.TOP_POSITIONS, hi - lo)
    assert all(lo <= p["index"] < hi for p in result["positions"])
    assert len({p["index"] for p in result["positions"]}) == len(weights)
    for p in result["positions"]:
        assert p["weight"] == pytest.approx(np.mean(p["layers"]))


# ----------------------------------------------------------------------------- attention


@pytest.mark.parametrize("which", ["trained", "two layers"])
def test_attention_rows_are_the_probes_rows_and_sum_to_one(which: str, word_model) -> None:
    model, tok = word_model if which == "trained" else (_model("attention"), ByteTokenizer())
    text = prompt_text(SUBJECT, SHORT)
    seen = why.seen_prompt(model, tok, SUBJECT, SHORT)
    assert seen.start == 0 and seen.ids == [tok.bos_id, *tok.encode(text)]
    rows = why.attention_weights(model, tok, seen.ids)  # (layers, W)
    maps = probes.attention_maps(model, tok, text)  # the probes' own run over the same text
    expected = np.stack([np.mean([maps.weights[(la, h)][-1] for h in maps.heads], axis=0) for la in maps.layers])
    assert rows.shape == (model.cfg.n_layer, len(seen.ids))
    np.testing.assert_allclose(rows, expected, atol=1e-6)
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, atol=1e-5)
    result = why.explain(model, tok, SUBJECT, SHORT, "x")
    assert result["family"] == "attention" and result["measure"] == "attention"
    assert result["layers"] == model.cfg.n_layer and result["window"]["tokens"] == len(seen.ids)
    _check_positions(result, 0, len(seen.ids))
    for p in result["positions"]:
        np.testing.assert_allclose(p["layers"], rows[:, p["index"]], atol=1e-9)


def test_a_long_prompt_is_weighed_over_the_window_the_engine_sees(word_model) -> None:
    model, tok = word_model
    ids = [tok.bos_id, *tok.encode(prompt_text(SUBJECT, LONG))]
    start = window_start(len(ids), model.cfg.block_size)
    assert start > 0
    result = why.explain(model, tok, SUBJECT, LONG, "x")
    assert result["window"]["start"] == start and result["window"]["tokens"] == len(ids) - start
    engine = CompletionEngine(model, tok)
    assert result["window"]["chars_before"] == engine.complete(LONG, SUBJECT).cut_chars
    _check_positions(result, 0, len(ids) - start)
    # a second computation: record the attention of the window directly and average the last rows
    with torch.no_grad(), record_attention() as rec:
        model(torch.tensor([ids[start:]]))
    direct = rec.get(0)[0, :, -1].double().mean(dim=0).numpy()  # (H, W) -> (W,)
    assert direct.sum() == pytest.approx(1.0, abs=1e-5)
    for p in result["positions"]:
        assert p["layers"][0] == pytest.approx(direct[p["index"]], abs=1e-6)
    # the highlighted context ends with the prompt the model saw, its top positions as pieces of their own
    text = "".join(piece["text"] for piece in result["context"]["pieces"])
    assert (prompt_text(SUBJECT, LONG)).endswith(text) and len(text) >= min(why.CONTEXT_CHARS, len(ids) - start - 1)
    assert result["context"]["cut"] is True  # the window starts after the prompt's start
    ranked = [piece["rank"] for piece in result["context"]["pieces"] if "rank" in piece]
    assert sorted(ranked) == list(range(1, len(result["positions"]) + 1))


# ----------------------------------------------------------------------------- alternatives


@pytest.mark.parametrize("mixer", ["attention", "gru", "rnn", "mingru"])
def test_alternatives_are_the_softmax_of_the_logits_there(mixer: str) -> None:
    model, tok = _model(mixer), ByteTokenizer()
    result = why.explain(model, tok, SUBJECT, LONG, "report")
    ids = [tok.bos_id, *tok.encode(prompt_text(SUBJECT, LONG))]
    ids = ids[window_start(len(ids), context_limit(model)):]
    probs = torch.softmax(_logits(model, ids), dim=-1)
    top = torch.topk(probs, why.ALTERNATIVES)
    assert [a["id"] for a in result["alternatives"]] == top.indices.tolist()
    np.testing.assert_allclose([a["p"] for a in result["alternatives"]], top.values.numpy(), rtol=1e-5)
    first = result["first_token"]  # byte tokens: the suggestion starts with the token "r"
    assert first["id"] == ord("r") and first["p"] == pytest.approx(float(probs[ord("r")]), rel=1e-5)
    assert first["rank"] == int((probs > probs[ord("r")]).sum()) + 1
    if mixer in ("rnn", "mingru"):
        assert result["measure"] is None and result["positions"] == [] and result["layers"] == 0


@pytest.mark.parametrize("prefix", ["Thanks for the ", "Hi Dana,\nthanks for the "])
def test_a_prompt_ending_in_a_space_is_explained_after_the_space(word_model, prefix: str) -> None:
    """Byte tokens: healing forces the space as the first generated token, so the suggestion's first token
    is chosen after it; that is the model fed the whole prompt, space included, in the decoder's window
    (the second prompt fills 32 tokens only with the space: the decoder re-encodes the last 16)."""
    model, tok = word_model
    engine = CompletionEngine(model, tok)
    shown = engine.complete(prefix, SUBJECT, max_words=2)
    assert shown.text, "the 300-step model proposes words at a word boundary"
    result = why.explain(model, tok, SUBJECT, prefix, shown.text)
    assert result["healed"] is True
    ids = [tok.bos_id, *tok.encode(prompt_text(SUBJECT, prefix))]
    limit = model.cfg.block_size
    assert ids[-1] == ord(" ") and len(ids) - 1 <= limit
    window = ids if len(ids) <= limit else ids[-(limit // 2):]
    assert result["window"]["tokens"] == len(window) and result["window"]["start"] == len(ids) - len(window)
    probs = torch.softmax(_logits(model, window), dim=-1)
    np.testing.assert_allclose([a["p"] for a in result["alternatives"]],
                               torch.topk(probs, why.ALTERNATIVES).values.numpy(), rtol=1e-5)
    # greedy decoding chose the likeliest token, and the shown text starts with it
    assert result["first_token"]["rank"] == 1 and result["alternatives"][0]["suggested"] is True
    assert shown.text.startswith(result["first_token"]["text"])


# ----------------------------------------------------------------------------- GRU gates


def test_gru_rewrites_are_one_minus_the_probes_update_gate(gru_run_dir: Path) -> None:
    model, tok, _ = load_run(gru_run_dir, device="cpu")
    text = prompt_text(SUBJECT, SHORT)
    result = why.explain(model, tok, SUBJECT, SHORT, "x")  # 32 tokens: all within RECENT
    _, _, z = probes.gru_gates(model, tok, text)
    rewrite = 1.0 - z.mean(axis=1)
    assert result["family"] == "gru" and result["measure"] == "rewrite" and result["window"]["measured_from"] == 0
    _check_positions(result, 0, len(rewrite))
    for p in result["positions"]:
        assert p["weight"] == pytest.approx(rewrite[p["index"]], abs=1e-6) and 0.0 <= p["weight"] <= 1.0


def test_gru_rewrites_of_a_long_prompt_continue_from_the_fused_state() -> None:
    """The last RECENT tokens' gates, after the earlier ones ran through the fused kernel, equal the
    probes' gate-by-gate loop over the whole text (two layers: each layer read on its own)."""
    model, tok = _model("gru"), ByteTokenizer()
    text = prompt_text(SUBJECT, LONG)
    n = len(tok.encode(text)) + 1
    result = why.explain(model, tok, SUBJECT, LONG, "x")
    first = result["window"]["measured_from"]
    assert first == n - why.RECENT and result["layers"] == 2
    _check_positions(result, first, n)
    whole = [1.0 - probes.gru_gates(model, tok, text, layer=la)[2].mean(axis=1) for la in (0, 1)]
    for p in result["positions"]:
        np.testing.assert_allclose(p["layers"], [w[p["index"]] for w in whole], atol=1e-5)
    assert all(m.record_gates is False for m in probes.gru_layers(model))  # put back as they were


# ----------------------------------------------------------------------------- the route


@pytest.fixture()
def client(word_run_dir: Path, tmp_path: Path) -> Iterator[TestClient]:
    with ready_client(ServerConfig(word_run_dir, min_confidence=0.0, log_dir=tmp_path / "log", max_queue=4)) as c:
        yield c


def test_why_answers_for_the_last_suggestion(client: TestClient) -> None:
    shown = client.post("/v1/complete", json={"prefix": LONG, "subject": SUBJECT}).json()
    r = client.post("/v1/why", json={"prefix": LONG, "subject": SUBJECT, "text": shown["text"] or "x"})
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"source", "family", "measure", "about", "suggestion", "first_token", "alternatives", "healed",
                         "window", "layers", "positions", "context"}
    assert body["family"] == "attention" and len(body["alternatives"]) == why.ALTERNATIVES
    assert body["window"]["chars_before"] == shown["cut_chars"]
    assert {"index", "token", "text", "before", "after", "weight", "layers"} == set(body["positions"][0])
    assert client.get("/v1/stats").json()["waiting"] == 0


@pytest.mark.parametrize("payload,field", [
    ({"prefix": "x"}, "text"),
    ({"prefix": "x", "text": ""}, "text"),
    ({"prefix": "x", "text": "y" * 2001}, "text"),
    ({"text": "y"}, "prefix"),
    ({"prefix": 3, "text": "y"}, "prefix"),
    ({"prefix": "x", "subject": "s" * 2001, "text": "y"}, "subject"),
    ({"prefix": "x", "text": "y", "session": "w1"}, "session"),
])
def test_why_bad_fields_are_422_naming_the_field(client: TestClient, payload: dict, field: str) -> None:
    r = client.post("/v1/why", json=payload)
    assert r.status_code == 422 and r.json()["field"] == field and field in r.json()["error"]


def test_why_gives_way_to_typing_when_the_queue_fills(client: TestClient) -> None:
    """Refused (503, Retry-After) once half the queue waits, so keystrokes always find room."""
    state = client.app.state.s
    state.waiting = 2  # half of max_queue=4
    try:
        r = client.post("/v1/why", json={"prefix": LONG, "text": "x"})
        assert r.status_code == 503 and "Retry-After" in r.headers and "error" in r.json()
        assert client.post("/v1/complete", json={"prefix": LONG}).status_code == 200
    finally:
        state.waiting = 0
