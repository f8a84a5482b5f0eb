"""Fitting a tiny model on a few sentences, so that a test's model suggests real words."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from seqlab.data.tokenizer import Tokenizer


def fit_sentences(model: torch.nn.Module, tok: Tokenizer, texts: Sequence[str], epochs: int) -> torch.nn.Module:
    """`epochs` passes of Adam (lr 1e-2), one step per text ([bos] text [eos]); the model, in eval mode."""
    seqs = [torch.tensor([tok.bos_id, *tok.encode(s), tok.eos_id]) for s in texts]
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(epochs):
        for s in seqs:
            logits, _ = model(s[None, :-1])
            loss = torch.nn.functional.cross_entropy(logits[0], s[1:])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()
