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


class Import:
    """One imported name as written: the skilld module it resolves to (None for another
    package's), the top-level package, and whether it sits under `if TYPE_CHECKING:`."""

    def __init__(self, target: str | None, top: str, typing_only: bool) -> None:
        self.target, self.top, self.typing_only = target, top, typing_only

    def __repr__(self) -> str:
        where = " (TYPE_CHECKING)" if self.typing_only else ""
        return f"{self.target or self.top}{where}"


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(module: str, text: str, known: set[str], *, package: bool = False) -> list[Import]:
    """Every import in `text` (the source of `module`), each resolved to a module of `known`."""
    home = module if package else module.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, typing_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, typing_only)
            return
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = home.split(".")[: len(home.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        for name in names:
            target = name
            while target and target not in known:  # `pkg.module.Name` -> `pkg.module`
                target = target.rpartition(".")[0]
            found.append(Import(target or None, name.split(".")[0], typing_only))
        for child in ast.iter_child_nodes(node):
            visit(child, typing_only)

    visit(ast.parse(text), False)
    return [i for i in found if i.target != module]


def imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The skilld modules `module` imports anywhere in its file."""
    text = path.read_text(encoding="utf-8")
    found = imports_of(module, text, set(known), package=path.name == "__init__.py")
    return {i.target for i in found if i.target is not None}


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
