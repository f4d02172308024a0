"""Each subpackage names what the rest of skilld may use (`__all__`), as httpx's own test of its
exported members does: a name used across packages is in its package's `__all__`, it comes
from a module that is not internal (`_name.py`), and every exported name resolves."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "skilld"
PACKAGES = ("commands", "curator", "effect", "evolve", "reports", "skills", "sync", "transcripts")


def imports_across_packages(files: dict[Path, str]) -> list[tuple[str, str, str, str]]:
    """(importing file, package, module, name) for every `from skilld.<package>.<module> import
    <name>` in a file (relative to src/) outside that package."""
    found = []
    for relative, text in sorted(files.items()):
        home = relative.parts[1] if len(relative.parts) > 2 else None
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            parts = node.module.split(".")
            if parts[0] != "skilld" or len(parts) < 3 or parts[1] == home:
                continue
            for alias in node.names:
                found.append((str(relative), parts[1], ".".join(parts[2:]), alias.name))
    return found


def strays(files: dict[Path, str]) -> list[str]:
    found = []
    for where, package, module, name in imports_across_packages(files):
        exported = importlib.import_module(f"skilld.{package}").__all__
        if module.split(".")[0].startswith("_"):
            found.append(f"{where}: skilld.{package}.{module} is internal")
        elif name not in exported and module not in exported:
            found.append(f"{where}: {name} is not in skilld.{package}.__all__")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_resolves(package: str) -> None:
    module = importlib.import_module(f"skilld.{package}")
    assert module.__all__
    for name in module.__all__:
        # A name, or a submodule (the command groups).
        exported = getattr(module, name, None) or importlib.import_module(
            f"{module.__name__}.{name}"
        )
        assert exported is not None, name


def test_other_packages_use_only_what_a_package_exports() -> None:
    files = {path.relative_to(SRC.parent): path.read_text("utf-8") for path in SRC.rglob("*.py")}
    assert strays(files) == []


def test_the_check_sees_a_stray_import() -> None:
    """It can fail: an internal module, or a name a package does not export, is seen."""
    files = {
        Path("skilld/daemon.py"): "from skilld.evolve._gates import decide\n",
        Path("skilld/app.py"): "from skilld.skills.library import Deleted\n",
        Path("skilld/evolve/supervisor.py"): "from skilld.evolve._gates import decide\n",
    }
    assert strays(files) == [
        "skilld/app.py: Deleted is not in skilld.skills.__all__",
        "skilld/daemon.py: skilld.evolve._gates is internal",
    ]
