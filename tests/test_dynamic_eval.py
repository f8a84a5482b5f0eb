"""Dynamic evaluation: lr 0 is the frozen model exactly (and the frozen scores are `seqlab eval`'s), a step on
an email makes its repeat likelier, emails are read in date order within each sender, and the run on disk
is never changed."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
from preparing import prepare

from seqlab.data.store import TokenStore
from seqlab.evaluation.context_scores import email_scores
from seqlab.evaluation.dynamic import (
    EmailMeta,
    adapt_pass,
    dynamic_eval,
    dynamic_order,
    format_dynamic,
    split_metadata,
)
from seqlab.evaluation.report import evaluate_run
from seqlab.options import EvalOptions
from seqlab.runs.load import load_run


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("method", ["sgd", "rms"])
def test_lr_zero_is_the_frozen_model_exactly(gru_run_dir: Path, method: str) -> None:
    before = _sha(gru_run_dir / "model.safetensors")
    r = dynamic_eval(gru_run_dir, EvalOptions(split="val", dynamic_lr=0.0, completion_emails=4, positions_per_email=2,
                                              saved_emails=2, saved_words=10, dynamic_method=method))
    assert r["frozen"] == r["dynamic"] and r["bpb_diff"]["diff"] == 0.0
    assert r["frozen"]["saved_chars"]["emails"] == 2 and r["frozen"]["at_coverage"]["positions"] > 0
    assert "frozen" in "\n".join(format_dynamic(r))
    # and the frozen pass is `seqlab eval`'s: the same ExactMatch positions and proposals, the same typing
    static = evaluate_run(gru_run_dir, EvalOptions(split="val", completion_emails=4, positions_per_email=2,
                                                   coverages=(0.2,), saved_emails=2, saved_words=10, precision="fp32"),
                          device="cpu")
    assert r["frozen"]["at_coverage"] == static["by_coverage"][0]
    assert r["frozen"]["saved_chars"] == static["saved_chars"]["at"]
    assert r["frozen"]["bpb"] == pytest.approx(static["bpb"], rel=1e-5)
    moved = dynamic_eval(gru_run_dir, EvalOptions(split="val", dynamic_lr=0.05, completion_emails=4,
                                                  positions_per_email=2, saved_emails=2, saved_words=10,
                                                  dynamic_method=method))
    assert moved["frozen"] == r["frozen"] and moved["dynamic"]["bpb"] != r["frozen"]["bpb"]
    assert _sha(gru_run_dir / "model.safetensors") == before  # the run on disk is only read


def test_the_frozen_scores_are_the_held_out_loop(gru_run_dir: Path, tiny_data_dir: Path) -> None:
    model, tok, cfg = load_run(gru_run_dir, "cpu")
    store = TokenStore(tiny_data_dir, "val")
    order = list(range(store.num_emails))
    frozen = adapt_pass(model, tok, store, order, 0.0, exact_texts={}, positions={}, typed_texts={})
    loop = email_scores(model, store, cfg.model.block_size, 8, torch.device("cpu"), tok)
    np.testing.assert_allclose(frozen.scores.nll, loop.nll, rtol=1e-5)
    assert (frozen.scores.bytes == loop.bytes).all() and (frozen.scores.tokens == loop.tokens).all()


def test_a_step_on_an_email_makes_its_repeat_likelier(gru_run_dir: Path, tiny_data_dir: Path) -> None:
    model, tok, _ = load_run(gru_run_dir, "cpu")
    store = TokenStore(tiny_data_dir, "val")
    frozen = adapt_pass(model, tok, store, [0, 0], 0.0, exact_texts={}, positions={}, typed_texts={})
    assert frozen.visits[0] == frozen.visits[1]
    learned = adapt_pass(model, tok, store, [0, 0], 0.05, exact_texts={}, positions={}, typed_texts={})
    assert learned.visits[0] == frozen.visits[0]  # scored before its own step
    assert learned.visits[1] < learned.visits[0]


def test_emails_are_read_in_date_order_within_each_sender() -> None:
    meta = [EmailMeta(0, "b@x", 30.0), EmailMeta(1, "a@x", 20.0), EmailMeta(2, "b@x", 10.0),
            EmailMeta(3, "", None), EmailMeta(4, "a@x", None), EmailMeta(5, "a@x", 5.0)]
    # senders by their first date (b@x at 10, a@x at 5), undated last within a sender, unknown senders last
    assert dynamic_order(meta) == [5, 1, 4, 2, 0, 3]


def test_sender_and_date_come_from_each_emails_source(tmp_path: Path) -> None:
    tree = tmp_path / "mail"
    tree.mkdir()
    written = {}
    for k, (sender, day) in enumerate([("dana@h.example", 3), ("sam@h.example", 1), ("dana@h.example", 1),
                                        ("sam@h.example", 2), ("dana@h.example", 2)]):
        raw = (f"From: {sender}\nTo: lee@h.example\nSubject: Note {k}\nMessage-ID: <n{k}@h.example>\n"
               f"Date: Mon, {day:02d} Jun 2002 10:00:00 +0000\n\n"
               f"Hello, this is note number {k} about the harbour plans.\n").encode()
        (tree / f"{k}.eml").write_bytes(raw)
        written[str(tree / f"{k}.eml")] = (sender, day)
    data = tmp_path / "data"
    prepare(str(tree), data, split=(0.99, 0.005, 0.005), progress=False, workers=1)
    store = TokenStore(data, "train")
    meta = split_metadata(data, "train", store.num_emails)
    assert [m.sender for m in meta if m.sender] and all(m.date is not None for m in meta)
    order = dynamic_order(meta)
    seen: dict[str, float] = {}
    for i in order:  # within each sender, dates never go back
        m = meta[i]
        assert m.date >= seen.get(m.sender, -1.0)
        seen[m.sender] = m.date


def test_the_bench_row_times_the_whole_command_against_the_training_minutes(gru_run_dir: Path, tiny_data_dir: Path,
                                                                            monkeypatch) -> None:
    from seqlab.bench import dynamic_speed

    monkeypatch.setattr(dynamic_speed, "model_source", lambda cache: (gru_run_dir, tiny_data_dir, 120.0, "tiny gru"))
    (row,) = dynamic_speed.rows(Path("unused"), threads=1)
    assert row["section"] == "evaluation" and row["unit"] == "%" and row["goal"] == "<= 100"
    detail = row["detail"]
    assert row["value"] == pytest.approx(100 * detail["seconds"] / 120.0) and detail["emails"] > 0
    assert detail["bpb_dynamic"] > 0 and detail["bpb_frozen"] > 0
