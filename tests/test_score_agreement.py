"""`Run.score`, summed over the held-out emails, against `seqlab eval`'s bits per byte, for a model where the
two could part: attention with RoPE over two layers, whose block (16 tokens) is far shorter than the emails.

With one layer a key is a function of its own input alone, so any way of cutting an email into windows
gives the same numbers (tests/test_api.py checks that case). With two, the keys of the second layer carry
what the first read before them, and how far back that reaches depends on how the email is cut: `seqlab
eval` slides over it with the keys held in a ring (evaluation/plans.py, "sliding"), and `Run.score` cuts
each email the same way (`seqlab.evaluation.heldout.email_logprobs`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import seqlab
from seqlab.cli.main import main

BLOCK = 16


@pytest.fixture(scope="module")
def run_and_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[seqlab.Run, seqlab.DataDir]:
    root = tmp_path_factory.mktemp("score")
    data = seqlab.prepare("synthetic", root / "data", count=40, split=(0.8, 0.1, 0.1), workers=1)
    run = seqlab.train(data, root / "run", preset="tiny", model={"n_layer": 2, "block_size": BLOCK, "pos": "rope"},
                       train={"max_steps": 4, "threads": 1, "seed": 3})
    return run, data


def test_score_of_every_email_is_seqlab_eval_for_a_two_layer_rope_model(
        run_and_data: tuple[seqlab.Run, seqlab.DataDir], capsys: pytest.CaptureFixture[str]) -> None:
    run, data = run_and_data
    assert run.config.model.n_layer == 2 and run.config.model.pos == "rope"
    scores = [run.score(text) for text in data.texts("val")]
    assert max(len(s.ids) for s in scores) > 4 * BLOCK  # every email runs past the block many times
    bits = sum(s.bits for s in scores)
    nbytes = sum(int(s.target_bytes.sum()) for s in scores)
    capsys.readouterr()
    assert main(["eval", str(Path(run.path)), "--json", "--completion-emails", "1", "--saved-emails", "1"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert bits / nbytes == pytest.approx(cli["bpb"], rel=1e-5)
