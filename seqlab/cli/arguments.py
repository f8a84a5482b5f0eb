"""Argument types shared by the subcommands: each turns bad text into one plain argparse error (exit 2)."""

from __future__ import annotations

import argparse


def split_fractions(text: str) -> tuple[float, float, float]:
    try:
        parts = tuple(float(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--split expects three numbers like 0.9,0.05,0.05, not {text!r}") from None
    if len(parts) != 3 or any(p < 0 for p in parts) or abs(sum(parts) - 1.0) > 1e-6:
        raise argparse.ArgumentTypeError(f"--split expects three non-negative fractions that sum to 1, not {text!r}")
    return parts  # type: ignore[return-value]


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}")
    return value


def unit_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, not {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, not {text!r}")
    return value
