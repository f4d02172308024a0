"""No import circles among skilld's modules: dependencies point one way (cli -> commands ->
services -> core), so a lower module never imports a higher one.

Every import counts, wherever it is written: at module level, under `if TYPE_CHECKING:` and
inside a function. A deferred import still makes the lower module depend on the higher one (it
only hides the circle from Python), and both circles this test was written for were of that
kind (`app` -> `team` in a function, `transcripts.model` -> `transcripts.signals` for a type).
A package's `__init__` importing its own modules is no circle; a module importing its package
(`from skilld.sync import X` inside skilld/sync/) is one and is counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / "skilld").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The skilld modules `module` imports anywhere in its file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            while name and name not in known:  # `pkg.module.Name` -> `pkg.module`
                name = name.rpartition(".")[0]
            if name:
                targets.add(name)
    targets.discard(module)
    return targets


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {module: imported(module, path, known) for module, path in known.items()}


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = import_graph()
    assert "skilld.transcripts.model" in graph["skilld.transcripts.signals"]  # module level
    assert "skilld.sync" in graph["skilld.app"]  # inside a function
    assert "skilld.state" in graph["skilld.team"]  # under TYPE_CHECKING


def test_the_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_module_of_skilld_imports_one_that_imports_it_back() -> None:
    assert cycles(import_graph()) == []
