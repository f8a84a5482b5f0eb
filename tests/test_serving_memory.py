"""The server's memory of the person (`--memory DATA_DIR`, the personal store under --learn, each sent email
the moment it is stored), the reply copier in the engine, and the why panel naming where a suggestion came
from, through a real server on loopback."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from serving_helpers import auth, running_server

from seqlab.cli.main import main
from seqlab.config import ModelConfig
from seqlab.data.prepare.tokenizer_fit import fit_tokenizer
from seqlab.data.store import TokenStore
from seqlab.data.tokenizer import ByteTokenizer, load_tokenizer
from seqlab.errors import UserError
from seqlab.evaluation.compressors import split_texts
from seqlab.models import build_model
from seqlab.serving.app import ServerConfig
from seqlab.serving.engine import CompletionEngine, prompt_text
from seqlab.serving.learner import LearnSettings
from seqlab.serving.personal import PERSONAL, PersonalStore
from seqlab.serving.remembered import build_memory, check_data_dir, data_emails, label
from seqlab.serving.why import told_by_source

MAIL = ("Quarterly figures", "Hi Dana,\n\nThe quarterly figures for the Harbourline account are attached. "
        "Could you check the freight totals before Friday?\n\nThanks, Sam")
TYPED = "Hi Dana,\n\nThe quarterly figures for the Harb"
ORIGINAL = "Hi Sam,\nThe Harbourline freight invoice is 4,500 EUR. Could we meet on Tuesday at 3pm?\nDana Whitfield"


def _post(url: str, config: ServerConfig, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, headers=auth(config), timeout=30)


def test_data_emails_are_the_train_split_with_labels(tiny_data_dir: Path, word_run_dir: Path) -> None:
    tok = load_tokenizer(word_run_dir / "tokenizer.json")
    emails = data_emails(tiny_data_dir, tok)
    texts = split_texts(TokenStore(tiny_data_dir, "train"), tok)
    assert [t for t, _ in emails] == texts
    assert all(name.startswith(" ".join(t.partition("\n\n")[0].split())[:20]) for t, name in emails)
    memory = build_memory(emails, None)
    assert len(memory) == len(texts)
    assert label("", None) == "(no subject)" and label("a  b", "2026-12-03") == "a b (2026-12-03)"


def test_a_folder_of_another_tokenizer_or_none_is_refused(tiny_data_dir: Path, word_run_dir: Path,
                                                          tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(tiny_data_dir, other)
    tok = load_tokenizer(word_run_dir / "tokenizer.json")
    check_data_dir(tiny_data_dir, tok)  # the run's own data: accepted
    bpe = fit_tokenizer("bpe", split_texts(TokenStore(tiny_data_dir, "train"), tok), vocab_size=300)
    (other / "tokenizer.json").write_text(bpe.to_json())  # ids that mean other text than the run's
    with pytest.raises(UserError, match="another tokenizer"):
        check_data_dir(other, tok)
    with pytest.raises(UserError, match="not a prepared data folder"):
        check_data_dir(tmp_path / "missing", tok)
    assert main(["serve", str(word_run_dir), "--port", "0", "--memory", str(tmp_path / "missing")]) == 2


def test_sent_mail_is_remembered_at_once_and_the_why_panel_names_it(word_run_dir: Path, tiny_data_dir: Path,
                                                                      tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(word_run_dir, run, ignore=shutil.ignore_patterns("serve", PERSONAL))
    PersonalStore(run).append("Earlier", "Kind regards from the harbour office")  # in the store before start
    config = ServerConfig(run, min_confidence=0.0, log_dir=tmp_path / "log", learn=True, memory=tiny_data_dir,
                          learn_settings=LearnSettings(idle_s=3600))  # no learning steps: only the memory
    apps: list[Any] = []
    with running_server(config, wrap=lambda app: apps.append(app) or app) as url:
        health = httpx.get(f"{url}/health", headers=auth(config), timeout=30).json()
        train = TokenStore(tiny_data_dir, "train").num_emails
        assert health["model"]["memory"]["emails"] == train + 1
        engine: CompletionEngine = apps[0].state.s.engine
        before = _post(url, config, "/v1/complete", {"prefix": TYPED, "subject": MAIL[0]}).json()
        assert before["source"] == "model"  # nothing like it was written yet
        assert _post(url, config, "/v1/sent", {"subject": MAIL[0], "body": MAIL[1]}).json()["stored"] is True
        assert len(engine.memory) == train + 2  # remembered the moment it was stored, no training step
        got = _post(url, config, "/v1/complete", {"prefix": TYPED, "subject": MAIL[0], "max_words": 5}).json()
        assert got["source"] == "memory" and got["text"] == "ourline account are attached."
        assert "origin" not in got  # which email: only the why panel tells, and only the compose page
        why = _post(url, config, "/v1/why", {"prefix": TYPED, "subject": MAIL[0], "text": got["text"],
                                             "id": got["id"]}).json()
        assert why["source"] == "memory" and "earlier mail" in why["about"]
        assert why["origin"].startswith("Quarterly figures (")
        # without the id, the memory's own proposal for the same email is recognised (here cut by the gate)
        again = _post(url, config, "/v1/why", {"prefix": TYPED, "subject": MAIL[0], "text": "ourline account"})
        assert again.json()["source"] == "memory"
        # a model suggestion is still explained by the model
        model_why = _post(url, config, "/v1/why", {"prefix": "Hi", "subject": "", "text": " there"}).json()
        assert model_why["source"] == "model" and "alternatives" in model_why
    memory_hit = told_by_source(engine, got["id"], MAIL[0], TYPED, got["text"], show_origin=False)
    assert memory_hit is not None and "origin" not in memory_hit  # an extension is not told which email


def _context_engine() -> CompletionEngine:
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=ByteTokenizer().vocab_size, block_size=64, mixer="gru", pos="none",
                                    n_layer=1, n_embd=32, n_head=2, context="cross", ctx_block_size=64)).eval()
    return CompletionEngine(model, ByteTokenizer(), threshold=0.0, rule="expected-chars")


def test_the_engine_copies_names_and_figures_of_the_message_answered() -> None:
    engine = _context_engine()
    name = engine.complete("Thanks for the invoice, Da", "Re: invoice", context=ORIGINAL, max_words=4)
    assert name.source == "reply" and name.text == "na Whitfield" and name.origin is None
    figure = engine.complete("Thanks, the 4,", "Re: invoice", context=ORIGINAL)
    assert figure.source == "reply" and figure.text == "500"
    # no context: the original proposes nothing, and the untrained model's guess is all there is
    assert engine.complete("Thanks, the 4,", "Re: invoice").source == "model"
    why = told_by_source(engine, name.id, "Re: invoice", "Thanks for the invoice, Da", name.text, show_origin=True)
    assert why is not None and why["source"] == "reply" and "answering" in why["about"] and "origin" not in why


def test_the_blend_weight_decides_between_memory_and_model() -> None:
    engine = _context_engine()
    engine.memory.add(prompt_text(*MAIL), "Quarterly figures (2026-12-01)")
    prompt = ("Hi Dana,\n\nThe quarterly figures for the Harb", MAIL[0])
    assert engine.complete(*prompt).source == "memory"
    engine.weights["memory"] = 0.0  # a weight of 0: the memory's proposals are worth nothing
    assert engine.complete(*prompt).source == "model"


def test_a_model_that_reads_no_context_still_gets_the_original_copied(word_run_dir: Path) -> None:
    from seqlab.runs.load import load_run

    model, tok, _ = load_run(word_run_dir, "cpu")
    engine = CompletionEngine(model, tok, threshold=0.0, rule="expected-chars")
    assert not engine.reads_context
    got = engine.complete("Thanks, the 4,", "Re: invoice", context=ORIGINAL)
    assert got.source == "reply" and got.text == "500"
