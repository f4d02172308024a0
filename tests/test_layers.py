"""Every arrow points down: the layers docs/design.md draws, checked on every import in src/.

`test_import_cycles` finds circles; this finds an arrow that points up without closing one:
`skills` importing `sync` (a team library's git work tree is a protocol `skills` defines and
`sync` implements), the transcript model importing anything of skilld's but the type of a git
context, and the modules that hold state.db's tables importing a layer above them. Every import
counts, wherever it is written: module level, inside a function, under `if TYPE_CHECKING:`.
"""

from __future__ import annotations

import sys

from tests.test_import_cycles import Import, imports_of, modules

#: Above the state layer: nothing that holds a state.db table may import these (prefixes).
ABOVE_STATE = (
    "skilld.actions",
    "skilld.app",
    "skilld.cli",
    "skilld.commands",
    "skilld.curator",
    "skilld.daemon",
    "skilld.evolve",
    "skilld.mcp",  # mcp_server, mcp_tools
    "skilld.reports",
    "skilld.skills",
    "skilld.sync",
    "skilld.team",
    "skilld.web",
)
MODEL = "skilld.transcripts.model"
#: What the transcript model may import of skilld's, and only for a type.
MODEL_TYPES = {"skilld.gitinfo"}


def all_imports() -> dict[str, list[Import]]:
    known = modules()
    return {
        module: imports_of(
            module, path.read_text("utf-8"), set(known), package=path.name == "__init__.py"
        )
        for module, path in known.items()
    }


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith((f"{prefix}.", f"{prefix}_"))


def holds_state_tables(module: str) -> bool:
    """The modules that hold state.db's tables: `skilld.state` and whatever is split out of it
    (`skilld.state.*`, `skilld.state_*`, `skilld.events*`)."""
    return _within(module, "skilld.state") or module.startswith("skilld.events")


def upward_arrows(graph: dict[str, list[Import]]) -> list[str]:
    """Each import that points up a layer, as `importer -> imported`."""
    bad = set()
    for module, found in graph.items():
        for imp in found:
            target = imp.target
            if (
                (_within(module, "skilld.skills") and target and _within(target, "skilld.sync"))
                or (holds_state_tables(module) and target and target.startswith(ABOVE_STATE))
                or (module == MODEL and not _model_may_import(imp))
            ):
                bad.add(f"{module} -> {imp}")
    return sorted(bad)


def _model_may_import(imp: Import) -> bool:
    if imp.target is None:
        return imp.top in sys.stdlib_module_names and imp.top != "skilld"
    return imp.target in MODEL_TYPES and imp.typing_only


def test_the_walk_sees_every_kind_of_import() -> None:
    graph = all_imports()
    model = {repr(i) for i in graph[MODEL]}
    assert "skilld.gitinfo (TYPE_CHECKING)" in model  # under TYPE_CHECKING
    team = {i.target for i in graph["skilld.team"]}
    assert "skilld.sync" in team  # inside a function
    assert "skilld.log" in team  # module level


def test_the_transcript_model_and_the_state_tables_are_where_the_layers_say() -> None:
    graph = all_imports()
    assert any(holds_state_tables(m) for m in graph)
    schema = [m for m, p in modules().items() if "CREATE TABLE events" in p.read_text("utf-8")]
    assert schema and all(holds_state_tables(m) for m in schema)
    assert MODEL in graph


def test_no_arrow_points_up() -> None:
    assert upward_arrows(all_imports()) == []


def test_the_check_sees_an_arrow_pointing_up() -> None:
    """It can fail: each kind of upward arrow, wherever the import is written, is seen."""
    known = {
        "skilld.skills.library",
        "skilld.sync",
        "skilld.sync.repo",
        "skilld.state",
        "skilld.state.events",
        "skilld.evolve.supervisor",
        "skilld.gitinfo",
        "skilld.routing",
        MODEL,
    }
    sources = {
        "skilld.skills.library": "def f():\n    from skilld.sync import GitError\n",
        "skilld.state.events": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from skilld.evolve.supervisor import Evolver\n"
        ),
        MODEL: "import yaml\nfrom skilld.gitinfo import GitContext\nfrom skilld import routing\n",
    }
    graph = {m: imports_of(m, text, known) for m, text in sources.items()}
    assert upward_arrows(graph) == [
        "skilld.skills.library -> skilld.sync",
        "skilld.state.events -> skilld.evolve.supervisor (TYPE_CHECKING)",
        f"{MODEL} -> skilld",
        f"{MODEL} -> skilld.gitinfo",
        f"{MODEL} -> skilld.routing",
        f"{MODEL} -> yaml",
    ]
