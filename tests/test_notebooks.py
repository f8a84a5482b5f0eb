"""The lesson notebooks in notebooks/: stored without outputs, and each runs top to bottom through nbclient on a
Python kernel (ipykernel, from the dev extras), where its own asserts check the lecture's numbers. A notebook
that stops teaching (a number no longer the slide's, an API name gone) fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# the lecture's lessons (seqlab lesson NAME) plus the quickstart and the soft lookup: one notebook each
EXPECTED = ["00-quickstart", "01-soft-lookup", "02-scaling", "03-permutation", "04-gradient-path", "05-parallel",
            "06-memory"]
CELL_TIMEOUT_S = 240  # a hang, not a speed goal: each notebook takes seconds


def test_one_notebook_per_lesson() -> None:
    assert [p.stem for p in NOTEBOOKS] == EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_without_outputs(path: Path) -> None:
    """Outputs and execution counts are results, not source: they bloat diffs and go stale (`make test` fails
    on them; clear them with Jupyter's "Clear All Outputs" before committing)."""
    book = nbformat.read(path, as_version=4)
    nbformat.validate(book)
    dirty = [i for i, cell in enumerate(book.cells)
             if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)]
    assert not dirty, f"{path.name}: cells {dirty} hold outputs or execution counts"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_uses_only_the_public_api(path: Path) -> None:
    """Notebooks teach with `import seqlab` and its public names (docs/api.md), never internal modules."""
    import seqlab

    book = nbformat.read(path, as_version=4)
    source = "\n".join(c.source for c in book.cells if c.cell_type == "code")
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("%"))  # magics
    tree = ast.parse(code)
    internal = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith("seqlab")]
    internal += [a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names
                 if a.name.startswith("seqlab.")]
    assert not internal, f"{path.name} imports internal modules: {internal}"
    used = set(re.findall(r"\bseqlab\.(\w+)", code))
    assert used and used <= set(seqlab.__all__), f"{path.name} uses non-public names: {used - set(seqlab.__all__)}"
    assert any(c.cell_type == "markdown" and len(c.source) > 200 for c in book.cells), "text that teaches"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_and_asserts_what_it_teaches(path: Path, tmp_path: Path) -> None:
    book = nbformat.read(path, as_version=4)
    # the kernel is this interpreter's (ipykernel's native "python3" spec), which has seqlab installed
    client = NotebookClient(book, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # a failing assert raises CellExecutionError with the cell and its traceback
    pictures = sum("image/png" in out.get("data", {}) for cell in book.cells if cell.cell_type == "code"
                   for out in cell.outputs)
    assert pictures >= 1, f"{path.name} shows no plot inline"
