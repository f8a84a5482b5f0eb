"""`seqlab attention RUN "text" --reply-to FILE`: per head, which tokens of the original each reply token read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from seqlab.cli.main import main
from seqlab.config import ModelConfig, apply_overrides, get_preset
from seqlab.data.tokenizer import ByteTokenizer
from seqlab.errors import UserError
from seqlab.inspection.cross import cross_attention_maps, read_most
from seqlab.models import build_model, record_attention
from seqlab.models.context_encoder import ContextBatch
from seqlab.training.trainer import train

TOK = ByteTokenizer()
ORIGINAL = "Shall we meet in room 5 on Tuesday?"


def test_maps_are_the_recorded_cross_weights_per_head() -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=TOK.vocab_size, mixer="gru", pos="none", n_layer=2, n_embd=16,
                                    n_head=2, context="cross")).eval()
    maps = cross_attention_maps(model, TOK, "Yes, room 5", ORIGINAL)
    assert maps.layers == [0, 1] and maps.heads == [0, 1]
    assert maps.context_labels[:5] == list("Shall") and maps.labels[0] == "<bos>"
    ids = torch.tensor([[TOK.bos_id, *TOK.encode("Yes, room 5")]])
    with torch.no_grad(), record_attention() as rec:
        model(ids, context=ContextBatch.from_lists([TOK.encode(ORIGINAL)]))
    for (layer, head), w in maps.weights.items():
        assert w.shape == (len(maps.labels), len(ORIGINAL))
        np.testing.assert_allclose(w.sum(1), 1.0, rtol=1e-5)
        np.testing.assert_allclose(w, rec.get(layer, "cross")[0, head].numpy())
    row = read_most(maps, 1, 0)[3]
    best = int(np.argmax(maps.weights[(1, 0)][3]))
    assert row["reply token"] == maps.labels[3] and row["read most"].startswith(maps.context_labels[best])


def test_attention_command_with_reply_to(tiny_data_dir: Path, tiny_run_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    cfg = apply_overrides(get_preset("tiny"), ["model.context=cross", "model.ctx_block_size=32",
                                               "train.max_steps=2", "train.threads=1"])
    train(tiny_data_dir, run, cfg, progress=False)
    original = tmp_path / "original.eml"
    original.write_bytes(b"From: a@x.org\nSubject: room\n\n" + ORIGINAL.encode() + b"\n")
    for name in ("cross.png", "cross.html"):
        assert main(["attention", str(run), "Yes, room 5", "--reply-to", str(original), "--out",
                     str(tmp_path / name)]) == 0
    page = (tmp_path / "cross.html").read_text()
    assert "read most" in page and "Cross-attention" in page
    assert (tmp_path / "cross.png").read_bytes()[:4] == b"\x89PNG"
    # a model without cross-attention, and an empty original, are user errors
    assert main(["attention", str(tiny_run_dir), "Yes", "--reply-to", str(original), "--out",
                 str(tmp_path / "x.png")]) == 2
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    assert main(["attention", str(run), "Yes", "--reply-to", str(empty), "--out", str(tmp_path / "y.png")]) == 2


@pytest.mark.parametrize("layer,head", [(5, None), (None, 9)])
def test_bad_layer_or_head(layer: int | None, head: int | None) -> None:
    model = build_model(ModelConfig(vocab_size=TOK.vocab_size, n_layer=1, n_embd=16, n_head=2,
                                    context="cross")).eval()
    with pytest.raises(UserError):
        cross_attention_maps(model, TOK, "Yes", ORIGINAL, layer, head)
