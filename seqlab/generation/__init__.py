"""Decoding from a trained model (greedy, sampling, beam) and word-level completion for autocomplete."""
