"""The server with a context: `context` in POST /v1/complete, a session keyed by its context, answers from
a kept state equal to answers from scratch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from serving_helpers import ready_client

from seqlab.config import ModelConfig
from seqlab.data.tokenizer import ByteTokenizer
from seqlab.generation.complete import complete, encode_prompt
from seqlab.generation.reply import reply_context
from seqlab.models import build_model
from seqlab.serving.app import ServerConfig
from seqlab.serving.engine import CompletionEngine, context_digest, prompt_text

TOK = ByteTokenizer()
ORIGINAL = "Could you send me the budget report before Friday? The meeting is in room 5."
OTHER = "Lunch on Tuesday?"
TYPED = "Hi Dana, sure, I will send the report"


def _model(mixer: str, pos: str) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=TOK.vocab_size, block_size=24, mixer=mixer, n_layer=2, n_embd=32, n_head=2,
                      pos=pos, mlp_ratio=2, context="cross", ctx_block_size=64)
    model = build_model(cfg).eval()
    with torch.no_grad():
        model.head.weight.mul_(8.0)  # clear argmax winners (as in test_serving_sessions)
        for block in model.blocks:
            block.xattn.out_proj.weight.mul_(30.0)  # an untrained model's context would barely matter
    return model


@pytest.mark.parametrize("mixer,pos", [("attention", "rope"), ("gru", "none")])
def test_session_with_context_equals_scratch_and_complete(mixer: str, pos: str) -> None:
    model = _model(mixer, pos)
    kept, fresh = CompletionEngine(model, TOK), CompletionEngine(model, TOK)
    for n in range(4, len(TYPED) + 1, 6):
        body = TYPED[:n]
        a = kept.complete(body, "Re: budget", session="w", context=ORIGINAL)
        b = fresh.complete(body, "Re: budget", session=f"new{n}", context=ORIGINAL)
        ctx = reply_context(model, TOK, ORIGINAL)
        c = complete(model, TOK, prompt_text("Re: budget", body), max_words=3, context=ctx)
        assert a.text == b.text == c.text
        assert a.confidence == pytest.approx(b.confidence, rel=1e-4, abs=1e-6)
        # the kept state's next-token logits: from the reused session, from scratch, and from one full pass
        ids, _, _ = encode_prompt(TOK, prompt_text("Re: budget", body))
        with torch.no_grad():
            full, _ = model(torch.tensor([ids[-24:] if mixer == "attention" else ids]), context=ctx)
        reused = kept.sessions.get("w")
        scratch = fresh.sessions.get(f"new{n}")
        assert reused is not None and scratch is not None
        torch.testing.assert_close(reused.logits, scratch.logits, atol=1e-4, rtol=1e-4)
        if len(ids) <= 24 or mixer != "attention":  # past the window the server's window moves in half steps
            torch.testing.assert_close(scratch.logits, full[:, -1].float(), atol=1e-4, rtol=1e-4)
        assert reused.context == context_digest(ctx)
        # the same session with another original starts again: its kept state read the first original
        d = kept.complete(body, "Re: budget", session="w", context=OTHER)
        e = fresh.complete(body, "Re: budget", context=OTHER)
        assert d.text == e.text
        switched = kept.sessions.get("w")
        assert switched is not None and switched.context == context_digest(reply_context(model, TOK, OTHER))
        # the two states read different originals: their next-token distributions differ
        assert not torch.allclose(reused.logits, switched.logits, atol=1e-3)
    assert len(kept.sessions) == 1  # one state per session, for the original it last read


def test_context_field_of_the_api(tiny_run_dir: Path, tmp_path: Path) -> None:
    with ready_client(ServerConfig(tiny_run_dir, min_confidence=0.0, log_dir=tmp_path)) as client:
        # this run reads no context, but the server copies the original's names and figures from it
        r = client.post("/v1/complete", json={"prefix": "Hi,\n\nThe report by Fri", "context": ORIGINAL})
        assert r.status_code == 200 and r.json()["source"] == "reply" and r.json()["text"].startswith("day")
        assert client.post("/v1/complete", json={"prefix": "Hi", "context": ""}).status_code == 200
        assert client.get("/health").json()["model"]["cross_attention"] is False
