"""The house's size rules, held for the whole package: no module over 400 lines, no function over 60 (a module
that long holds two things; a function that long has steps worth naming). ARCHITECTURE.md, "Conventions"."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "seqlab"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def test_no_module_is_over_400_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in _modules() if (n := p.read_text().count("\n")) > MAX_MODULE_LINES}
    assert not long, f"split these where they hold two things: {long}"


def test_no_function_is_over_60_lines() -> None:
    long = {}
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1  # its def line to its last line
                if lines > MAX_FUNCTION_LINES:
                    long[f"{p.relative_to(ROOT)}:{node.name}"] = lines
    assert not long, f"name the steps of these: {long}"
