"""seqlab: train, compare and inspect next-token language models on email."""

__version__ = "0.1.0"
