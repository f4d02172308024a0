"""skilld: a background daemon that lets an AI agent learn reusable skills from its sessions."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

__version__ = "0.1.0"


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], object]:
    """A package's `__getattr__` serving the names of its `__all__` from their modules on first
    use: a package states what the rest of the code may use without loading it all (an agent's
    hook loads the usage sidecar, not the library)."""

    def getattr_(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return getattr_
