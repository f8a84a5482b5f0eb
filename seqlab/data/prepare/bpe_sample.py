"""The bounded sample of train text a BPE tokenizer is fitted on, so fitting never holds a large corpus.

HF's BPE trainer keeps a count of every distinct pre-tokenized word it is fed, and its time grows with
the text; neither needs a whole large corpus: merges learned from tens of MB of mail are those of the
whole. So `prepare` feeds it all train emails when they hold at most `BPE_SAMPLE_BYTES` bytes (every
small corpus: the tokenizer is exactly the one fitted on all of train), and otherwise a seeded Bernoulli
sample of whole emails spread over the whole split, each kept with probability limit / total and never
more than `limit` bytes in all. The sample depends on the emails' sizes, their order and the seed
only, so the tokenizer stays a function of the input and the seed.
"""

from __future__ import annotations

import random

BPE_SAMPLE_BYTES = 64_000_000


class ByteSample:
    """Decides, email by email in a fixed order, which train texts the tokenizer sees."""

    def __init__(self, total_bytes: int, seed: int, limit: int = BPE_SAMPLE_BYTES) -> None:
        if limit < 1:
            raise ValueError(f"the sample limit must be at least 1 byte, not {limit}")
        self.limit = limit
        self.rate = 1.0 if total_bytes <= limit else limit / total_bytes
        self._rng = random.Random(f"bpe-sample:{seed}")  # a str seed hashes with SHA-512: stable across runs
        self.taken = 0  # bytes sampled so far

    def take(self, size: int) -> bool:
        """True when the next text, of `size` bytes, belongs to the sample."""
        if self.rate >= 1.0:
            self.taken += size
            return True
        if self._rng.random() >= self.rate or self.taken + size > self.limit:
            return False
        self.taken += size
        return True
