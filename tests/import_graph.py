"""The rewardloop package's import graph, read with ``ast``: every module's imports (those inside functions
too; relative ones resolved), the imports under ``if TYPE_CHECKING:`` left out, since they never run.
``from package import name`` is an import of ``package.name`` when that is a module, else of ``package``
(its ``__init__``). Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``; those implicit
edges are left out, or every package whose ``__init__`` imports its modules would be a cycle.
Read by tests/unit/test_import_cycles.py and the tests that hold a wing to what it may import.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

import rewardloop

PACKAGE = Path(rewardloop.__file__).parent


def modules() -> dict[str, Path]:
    """{dotted name: file} of every module of the package (a package by its ``__init__.py``)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ("rewardloop", *path.relative_to(PACKAGE).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(nodes):
    """The Import and ImportFrom nodes among ``nodes`` at any depth, but those under ``if TYPE_CHECKING:``."""
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node):
            yield from _imports(node.orelse)
        else:
            yield from _imports(ast.iter_child_nodes(node))


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that module ``name`` (at ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in _imports([ast.parse(path.read_text(), str(path))]):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            parts = package.split(".")
            base = parts[:len(parts) - node.level + 1] if node.level else []  # `from .. import x`: one up
            source = ".".join([*base, *([node.module] if node.module else [])])
            targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
                       for alias in node.names]
        for target in targets:
            while target and target not in known:  # `import a.b.attr` style: the module it names
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imported(name, path, set(found)) for name, path in found.items()}


def _shortest_cycle(edges: dict[str, set[str]], start: str) -> list[str] | None:
    """The shortest import path from ``start`` back to itself, breadth first."""
    previous, queue = {}, deque([start])
    while queue:
        node = queue.popleft()
        for target in sorted(edges[node]):
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if target not in previous:
                previous[target] = node
                queue.append(target)
    return None


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle per group of modules that import each other, each starting at its first module."""
    out, covered = [], set()
    for name in sorted(edges):
        if name in covered:
            continue
        cycle = _shortest_cycle(edges, name)
        if cycle:
            out.append(cycle)
            covered.update(cycle)
    return out
