"""No import circle anywhere in the package, counting every import: function-local ones too, since a local
import is how a circle hides from the import-time order (and from a reader of the module's head).

The graph is built from the source with `ast` (every `import` / `from ... import` anywhere in a module),
and its cycles are found with networkx. `ROOMS` names the module prefixes held to it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import seqlab

ROOT = Path(seqlab.__file__).parent
ROOMS = ("seqlab",)


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = ("seqlab", *path.relative_to(ROOT).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_graph() -> nx.DiGraph:
    """Module -> every seqlab module it imports (a `from package import module` names the module)."""
    modules, graph = _modules(), nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target not in (name, "seqlab"):
                    graph.add_edge(name, target)
    return graph


def test_no_import_circle_in_the_data_rooms() -> None:
    graph = import_graph()
    rooms = graph.subgraph(n for n in graph if n.startswith(ROOMS))
    assert list(nx.simple_cycles(rooms)) == []
