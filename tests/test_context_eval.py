"""Scores per email (evaluation/context_scores.py) and the context in eval and complete: the per-email
pass adds up to the whole-split pass, groups emails by context, and the bootstrap interval behaves."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from seqlab.cli.main import main
from seqlab.config import apply_overrides, get_preset
from seqlab.data.store import TokenStore
from seqlab.evaluation.context_scores import by_context, email_scores, paired_bootstrap, totals
from seqlab.evaluation.heldout import evaluate_lm
from seqlab.evaluation.report import evaluate_run
from seqlab.generation.complete import complete
from seqlab.generation.reply import reply_context
from seqlab.options import EvalOptions
from seqlab.runs.load import load_run
from seqlab.training.trainer import train

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def ctx_run_dir(tiny_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("runs") / "ctx"
    cfg = apply_overrides(get_preset("tiny"), ["model.context=cross", "model.ctx_block_size=64",
                                               "train.max_steps=30", "train.threads=1"])
    train(tiny_data_dir, run, cfg, progress=False)
    return run


@pytest.mark.parametrize("fixture", ["tiny_run_dir", "gru_run_dir"])
def test_per_email_scores_add_up_to_the_split(fixture: str, tiny_data_dir: Path,
                                               request: pytest.FixtureRequest) -> None:
    """For a model without context the per-email pass and heldout's whole-split pass are one computation."""
    model, tok, cfg = load_run(request.getfixturevalue(fixture), "cpu")
    store = TokenStore(tiny_data_dir, "val")
    whole = evaluate_lm(model, store, cfg.model.block_size, 8, CPU, tok)
    scores = email_scores(model, store, cfg.model.block_size, 8, CPU, tok)
    t = totals(scores)
    assert t["tokens"] == whole["tokens"] and t["bytes"] == whole["bytes"]
    assert t["bpb"] == pytest.approx(whole["bpb"], rel=1e-5)
    assert np.all(scores.tokens == store.lengths - 1)  # every target of every email, once
    groups = by_context(scores)
    assert groups["with_context"]["emails"] + groups["without_context"]["emails"] == store.num_emails
    assert groups["with_context"]["emails"] == int((store.contexts.lengths > 0).sum()) > 0


def test_context_model_reads_contexts_in_eval(ctx_run_dir: Path, tiny_data_dir: Path) -> None:
    model, tok, cfg = load_run(ctx_run_dir, "cpu")
    store = TokenStore(tiny_data_dir, "val")
    read = email_scores(model, store, cfg.model.block_size, 8, CPU, tok)
    blind = email_scores(model, store, cfg.model.block_size, 8, CPU, tok, use_context=False)
    has = read.has_context
    # emails without context score the same either way; the replies differ when their context is read
    np.testing.assert_allclose(read.nll[~has], blind.nll[~has], rtol=1e-5)
    assert not np.allclose(read.nll[has], blind.nll[has], rtol=1e-6)
    same = paired_bootstrap(read, read, samples=200)
    assert same["diff"] == 0.0 and same["low"] == same["high"] == 0.0
    diff = paired_bootstrap(read, blind, has, samples=200)
    assert diff["low"] <= diff["diff"] <= diff["high"] and diff["emails"] == int(has.sum())
    result = evaluate_run(ctx_run_dir, EvalOptions(split="val", completion_emails=3))
    assert result["by_context"]["with_context"]["bpb"] == pytest.approx(read.bpb(has), rel=1e-5)
    assert result["bpb"] == pytest.approx(read.bpb(), rel=1e-5)


def test_complete_with_a_reply_to(ctx_run_dir: Path, tiny_run_dir: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    model, tok, _ = load_run(ctx_run_dir, "cpu")
    original = "Could you send the budget report before Tuesday?"
    ctx = reply_context(model, tok, original)
    greedy = complete(model, tok, "Hi Ann,\n\nSure, I", context=ctx, max_words=3)
    beam = complete(model, tok, "Hi Ann,\n\nSure, I", context=ctx, max_words=3, beam=2)
    assert isinstance(greedy.text, str) and isinstance(beam.text, str)
    message = tmp_path / "original.eml"
    message.write_bytes(b"From: ann@x.org\nSubject: budget\n\n" + original.encode() + b"\n\n> older quote\n")
    plain = tmp_path / "original.txt"
    plain.write_text(original + "\n")
    for path in (message, plain):  # a message file and plain text give the same context
        assert main(["complete", str(ctx_run_dir), "Hi Ann,\n\nSure, I", "--reply-to", str(path),
                     "--show-confidence"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == out[1] == f"{greedy.text}\t(confidence {greedy.confidence:.3f})"
    assert main(["complete", str(tiny_run_dir), "Hi", "--reply-to", str(plain)]) == 2  # reads no context
    assert main(["complete", str(ctx_run_dir), "Hi", "--reply-to", str(tmp_path / "missing")]) == 2
