"""Held-out evaluation: loss and bits per byte, compressor baselines, ExactMatch at coverage."""
