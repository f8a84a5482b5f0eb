"""The trainer's validation is `seqlab eval`'s scoring on a sample of whole emails: with a sample that
covers the split, every family's val_bpb equals `evaluate_lm` on that split (one loop, one truth)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from seqlab.config import apply_overrides, get_preset
from seqlab.data.store import TokenStore
from seqlab.evaluation.heldout import evaluate_lm
from seqlab.evaluation.plans import sample_emails
from seqlab.training.trainer import Trainer

FAMILIES = {
    "attn-rope": [],  # sliding lanes
    "attn-learned": ["model.pos=learned"],  # windows overlapping by half
    "attn-cross": ["model.context=cross", "model.ctx_block_size=64"],
    "gru": ["model.mixer=gru", "model.pos=none"],  # lanes, state carried
    "gru-init_state": ["model.mixer=gru", "model.pos=none", "model.context=init_state", "model.ctx_block_size=64"],
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_validation_of_the_whole_split_is_eval(family: str, tiny_data_dir: Path, tmp_path: Path) -> None:
    cfg = apply_overrides(get_preset("tiny"), ["train.threads=1", "train.eval_batches=100000", *FAMILIES[family]])
    trainer = Trainer(tiny_data_dir, tmp_path / "run", cfg, progress=False)
    store = TokenStore(tiny_data_dir, "val")
    assert len(trainer.validator.emails) == int((store.lengths > 1).sum())  # the sample is the whole split
    got = trainer.evaluate()
    want = evaluate_lm(trainer.model, store, cfg.model.block_size, cfg.train.batch_size, "cpu", trainer.tok)
    assert got["val_bpb"] == pytest.approx(want["bpb"], rel=1e-5)
    assert got["val_loss"] == pytest.approx(want["loss"], rel=1e-5)


def test_sample_emails_is_fixed_and_reaches_its_targets(tiny_data_dir: Path) -> None:
    store = TokenStore(tiny_data_dir, "val")
    n = store.lengths.astype(np.int64) - 1
    a, b = sample_emails(store, 500, seed=3), sample_emails(store, 500, seed=3)
    assert np.array_equal(a, b) and np.all(np.diff(a) > 0)
    assert n[a].sum() >= 500 and n[a].sum() - n[a].max() < 500  # stops at the email that reaches the budget
    assert not np.array_equal(a, sample_emails(store, 500, seed=4))
    assert len(sample_emails(store, 1, seed=0)) == 1
