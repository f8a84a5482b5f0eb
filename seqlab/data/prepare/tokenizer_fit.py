"""The tokenizer stage of `prepare`: fit a tokenizer on the train split only (after the split, before encoding).

The byte tokenizer needs no fitting. A BPE tokenizer is fitted on the train texts read back from the
spool, all of them or a seeded sample of about `BPE_SAMPLE_BYTES` when train is larger (`bpe_sample.py`);
with `--tokenizer-from` a tokenizer already in use is taken instead (`reuse_tokenizer.py`). The classes
and reading a tokenizer back are `seqlab.data.tokenizer`, which both sides use.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from seqlab.data.prepare.bpe_sample import ByteSample
from seqlab.data.prepare.spool import iter_spool
from seqlab.data.tokenizer import KINDS, MIN_BPE_VOCAB, SPECIALS, BPETokenizer, ByteTokenizer, Tokenizer, clean_text
from seqlab.errors import UserError

__all__ = ["fit_tokenizer", "train_texts"]


def train_texts(spool: Path, splits: Sequence[str], seed: int) -> Iterator[str]:
    """The train texts a BPE tokenizer is fitted on: all of them, or a seeded sample of about
    `BPE_SAMPLE_BYTES` when train is larger (bpe_sample.py). The byte tokenizer never reads them."""
    total = sum(len(rec.text) for rec, split in zip(iter_spool(spool), splits) if split == "train")
    sample = ByteSample(total, seed)
    for rec, split in zip(iter_spool(spool), splits):
        if split == "train" and sample.take(len(rec.text)):
            yield rec.text.decode("utf-8")


def _clean_stream(texts: Iterable[str]) -> Iterator[str]:
    for t in texts:
        yield clean_text(t)


def fit_tokenizer(kind: str, texts: Iterable[str], vocab_size: int = 4096) -> Tokenizer:
    """A tokenizer of `kind` fitted on `texts` (the train split only; an iterator is fine).

    "byte" needs no fitting: `texts` is not read and `vocab_size` is ignored (always 259). "bpe" trains
    byte-level BPE so that the total vocabulary, specials included, is at most `vocab_size`; it can be
    smaller when the texts offer fewer pairs seen at least twice (min_frequency=2, so one-off strings
    do not become tokens).
    """
    if kind == "byte":
        return ByteTokenizer()
    if kind != "bpe":
        raise UserError(f"Unknown tokenizer kind {kind!r}; choose one of {', '.join(KINDS)}.")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < MIN_BPE_VOCAB:
        raise UserError(f"The BPE vocabulary size must be an integer of at least {MIN_BPE_VOCAB}, not {vocab_size!r}.")
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIALS),
        min_frequency=2,
        show_progress=False,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    hf.train_from_iterator(_clean_stream(texts), trainer=trainer)
    return BPETokenizer(json.loads(hf.to_str()))
