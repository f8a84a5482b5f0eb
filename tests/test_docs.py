"""README.md and ARCHITECTURE.md stay true to the code: every file, test and command they name exists."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest

from seqlab.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
ARCHITECTURE = (ROOT / "ARCHITECTURE.md").read_text()


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def _cited_tests(text: str) -> list[tuple[str, str]]:
    """(file, test) pairs of `test_x.py::test_y` cells; a bare `::test_z` continues the last file named."""
    pairs, current = [], None
    for m in re.finditer(r"`(test_\w+\.py)?::(test_\w+)`|`(test_\w+\.py)`", text):
        if m.group(3):
            current = m.group(3)
            continue
        current = m.group(1) or current
        pairs.append((current, m.group(2)))
    return pairs


def test_readme_cites_tests_that_exist() -> None:
    pairs = _cited_tests(README)
    assert len(pairs) >= 15, "the lecture table should cite its tests"
    missing = [f"{f}::{t}" for f, t in pairs if not (ROOT / "tests" / f).exists()
               or t not in _test_names(ROOT / "tests" / f)]
    assert not missing, f"README cites tests that do not exist: {missing}"


@pytest.mark.parametrize("doc", ["README.md", "ARCHITECTURE.md"])
def test_docs_name_modules_that_exist(doc: str) -> None:
    text = (ROOT / doc).read_text()
    rooms = "data|models|runs|generation|evaluation|training|studies|cli"
    paths = set(re.findall(rf"(?<![\w/])((?:{rooms})/[\w/]+\.py)", text))
    assert paths, f"{doc} should name the modules it describes"
    missing = sorted(p for p in paths if not (ROOT / "seqlab" / p).exists())
    assert not missing, f"{doc} names modules that do not exist: {missing}"


def test_architecture_describes_every_room() -> None:
    rooms = sorted(p.name for p in (ROOT / "seqlab").iterdir() if (p / "__init__.py").exists())
    assert {"cli", "data", "models", "runs", "training"} <= set(rooms)
    missing = [r for r in rooms if f"**`{r}/`**" not in ARCHITECTURE]
    assert not missing, f"ARCHITECTURE.md has no paragraph for {missing}"


def _readme_commands() -> list[list[str]]:
    """The `seqlab ...` lines of README's code blocks, as argv lists (comments dropped)."""
    # fences paired with their language tag, so a ```python block's closing fence opens nothing
    blocks = [body for lang, body in re.findall(r"```(\w*)\n(.*?)```", README, flags=re.S) if not lang]
    commands = []
    for block in blocks:
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0].endswith("seqlab"):
                commands.append(words[1:])
    return commands


def test_readme_commands_parse() -> None:
    """Every command README shows is accepted by the parser (running them is the demo's and the tests' job)."""
    commands = _readme_commands()
    assert len(commands) >= 8
    parser = build_parser()
    for argv in commands:
        args, extra = parser.parse_known_args(argv)
        assert args.command == argv[0]
        assert all("=" in e and not e.startswith("-") for e in extra), f"README command does not parse: {argv}"


def test_readme_python_block_runs(tmp_path: Path) -> None:
    """README's Python lines prepare, train, load and complete for real (in a fresh folder, tiny sizes)."""
    import subprocess
    import sys

    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert len(blocks) == 1 and len(blocks[0].strip().splitlines()) == 5
    done = subprocess.run([sys.executable, "-c", blocks[0]], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "run-py" / "config.json").is_file() and (tmp_path / "out" / "data-py").is_dir()
    assert done.stdout.endswith("\n") and done.stderr == ""  # nothing printed but the completion
