"""README.md, docs/*.md and ARCHITECTURE.md stay true to the code: every file, test, link and command they name
exists or parses."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from docs_commands import doc_problems

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
ARCHITECTURE = (ROOT / "ARCHITECTURE.md").read_text()
DOCS = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]


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


@pytest.mark.parametrize("doc", ["ARCHITECTURE.md", *DOCS])
def test_docs_name_modules_that_exist(doc: str) -> None:
    text = (ROOT / doc).read_text()
    rooms = "|".join(p.name for p in (ROOT / "seqlab").iterdir() if (p / "__init__.py").exists())
    paths = set(re.findall(rf"(?<![\w/])(?:seqlab/)?((?:{rooms})/[\w/]+\.py)", text))
    assert paths or doc not in ("README.md", "ARCHITECTURE.md"), f"{doc} should name the modules it describes"
    missing = sorted(p for p in paths if not (ROOT / "seqlab" / p).exists())
    assert not missing, f"{doc} names modules that do not exist: {missing}"


def test_architecture_describes_every_room() -> None:
    rooms = sorted(p.name for p in (ROOT / "seqlab").iterdir() if (p / "__init__.py").exists())
    assert {"cli", "data", "models", "runs", "training"} <= set(rooms)
    missing = [r for r in rooms if f"**`{r}/`**" not in ARCHITECTURE]
    assert not missing, f"ARCHITECTURE.md has no paragraph for {missing}"


@pytest.mark.parametrize("doc", DOCS)
def test_doc_commands_parse(doc: str) -> None:
    """Every seqlab command a doc shows parses with the real CLI parser and config (tests/docs_commands.py),
    every `python -m seqlab.X` module and script exists, every `make` target is in the Makefile."""
    problems, counts = doc_problems(doc, (ROOT / doc).read_text())
    assert not problems, "commands in the docs that the code does not accept:\n" + "\n".join(problems)
    if doc == "README.md":
        assert counts.get("seqlab", 0) >= 5 and counts.get("make", 0) >= 2, counts


def test_the_docs_check_fails_on_a_made_up_flag() -> None:
    """The checker itself: a bad snippet fails with the doc, line and argparse's message; a good one passes."""
    bad = "\n".join([
        "Intro with `seqlab serve RUN --no-such-flag` inline.",  # line 1
        "```",
        "OMP_NUM_THREADS=1 .venv/bin/seqlab train DATA_DIR --out RUN \\",  # line 3, continued
        "    --preset tiny --made-up-flag 3   # a comment",
        "seqlab train DATA_DIR --out RUN model.nonsense=1",  # line 5
        "seqlab train DATA_DIR --out RUN --preset huge",  # line 6
        "python -m seqlab.no_such_module",  # line 7
        "make no-such-target",  # line 8
        "seqlab serve RUN --port eighty",  # line 9
        "```",
    ])
    problems, _ = doc_problems("bad.md", bad)
    expected = [("bad.md:1:", "--no-such-flag"), ("bad.md:3:", "--made-up-flag"),
                ("bad.md:5:", "unknown config field 'model.nonsense'"), ("bad.md:6:", "unknown preset 'huge'"),
                ("bad.md:7:", "no module seqlab.no_such_module"), ("bad.md:8:", "no make target no-such-target"),
                ("bad.md:9:", "--port")]
    assert len(problems) == len(expected), problems
    for problem, (where, what) in zip(problems, expected, strict=True):
        assert problem.startswith(where) and what in problem, problem
    good = "\n".join([
        "Run `seqlab calibrate --coverage` or `make demo`; `seqlab serve: loading` is output.",
        "```sh",
        "OMP_NUM_THREADS=1 .venv/bin/seqlab train DATA_DIR --out RUN \\",
        "    --preset tiny model.mixer=gru train.max_steps=60   # a comment",
        "PYTHONPATH=. python3 -m seqlab bench --only gpu --out \"$OUT\"",
        "seqlab serve RUN --port N | tee log.txt",
        "python -m seqlab.api.reference > docs/api.md",
        "```",
    ])
    assert doc_problems("good.md", good) == ([], {"seqlab": 4, "make": 1, "module": 1})


def _anchors(path: Path) -> set[str]:
    """The heading anchors of a Markdown file, spelled as GitHub spells them."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_doc_links_point_at_files_and_headings_that_exist() -> None:
    """Relative Markdown links of README.md and docs/*.md name files of the repository, and their #anchors
    headings of those files."""
    missing = []
    for doc in DOCS:
        for target, anchor in re.findall(r"\]\(([^)\s#]*)(?:#([^)\s]*))?\)", (ROOT / doc).read_text()):
            path = (ROOT / doc).parent / target if target else ROOT / doc
            if "://" in target:
                continue
            if not path.exists() or (anchor and path.suffix == ".md" and anchor not in _anchors(path)):
                missing.append(f"{doc}: {target}#{anchor}" if anchor else f"{doc}: {target}")
    assert not missing, f"links to files or headings that do not exist: {missing}"


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
