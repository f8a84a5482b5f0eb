"""What the subcommands' parsers share: argument types (each turns bad text into one plain argparse error,
exit 2) and the parser of a command that reads a RUN_DIR."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

N = TypeVar("N", int, float)


def split_fractions(text: str) -> tuple[float, float, float]:
    try:
        parts = tuple(float(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--split expects three numbers like 0.9,0.05,0.05, not {text!r}") from None
    if len(parts) != 3 or any(p < 0 for p in parts) or abs(sum(parts) - 1.0) > 1e-6:
        raise argparse.ArgumentTypeError(f"--split expects three non-negative fractions that sum to 1, not {text!r}")
    return parts  # type: ignore[return-value]


def _number(text: str, convert: Callable[[str], N], accept: Callable[[N], bool], expected: str) -> N:
    """`convert(text)` when it parses and `accept` takes it; otherwise 'expected EXPECTED, not TEXT'."""
    try:
        value = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, not {text!r}") from None
    if not accept(value):  # comparisons with nan are false, so nan is refused too
        raise argparse.ArgumentTypeError(f"expected {expected}, not {text!r}")
    return value


def positive_int(text: str) -> int:
    return _number(text, int, lambda v: v >= 1, "a positive integer")


def positive_float(text: str) -> float:
    return _number(text, float, lambda v: v > 0, "a positive number")


def unit_float(text: str) -> float:
    return _number(text, float, lambda v: 0.0 <= v <= 1.0, "a number between 0 and 1")


def non_negative_float(text: str) -> float:
    return _number(text, float, lambda v: 0.0 <= v < float("inf"), "a number of 0 or more")


def coverages(text: str) -> tuple[float, ...]:
    """Comma-separated fractions in (0, 1], e.g. 0.05,0.1,0.2,0.5,1."""
    try:
        values = tuple(float(p) for p in text.split(","))
    except ValueError:
        values = ()
    if not values or not all(0.0 < v <= 1.0 for v in values):
        raise argparse.ArgumentTypeError(f"expected fractions in (0, 1] like 0.05,0.1,0.5,1, not {text!r}")
    return values


def add_run_reader(sub: argparse._SubParsersAction, name: str, *, help: str, description: str,
                   text: str | None = None) -> argparse.ArgumentParser:
    """The parser of a subcommand that reads a trained RUN_DIR, and then, if `text` names it, one text."""
    p = sub.add_parser(name, help=help, description=description)
    p.add_argument("run_dir", type=Path, help="a folder written by `seqlab train`")
    if text:
        p.add_argument(text)
    return p
