"""`skilld usage use|view|patch NAME`: one bump, for an agent's hook.

A hook runs on every matching tool call and the agent waits for it, so this command loads the
routing and the sidecar only: no state.db, no library, no other command (bench/startup.py).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from skilld.commands.common import CommandTable, Parser, library_option
from skilld.config import Config
from skilld.errors import Failure
from skilld.routing import (
    choose_library,
    nameable_agent_libraries,
    project_library,
    project_root,
    project_skills_dir,
    requested_library,
    require_real_project_dir,
    resolve,
    with_named_library,
)
from skilld.skills.layout import find_skill_file
from skilld.skills.names import InvalidName, validate_name
from skilld.skills.usage import UsageStore


def cmd_usage(config: Config, args: argparse.Namespace) -> int:
    """The library is `--library`, else `$SKILLD_LIBRARY`, else the one whose dir holds the
    skill (the project's of the working directory included), else the only one."""
    routing = with_named_library(resolve(config), config, args.library)
    specs = {spec.name: spec for spec in routing.libraries.values()}
    for spec in routing.libraries.values():
        root = project_root(spec, os.getcwd())
        if root is not None and spec.project_dir and project_skills_dir(root, spec.project_dir):
            project = project_library(spec, root)
            specs[project.name] = project
    requested = requested_library(args.library)
    holding = [
        name
        for name, spec in specs.items()
        if requested is None and find_skill_file(spec.dir, args.name, recursive=spec.recursive)
    ]
    chosen = specs[
        choose_library(
            list(specs),
            configured=len(routing.libraries),
            requested=requested,
            holding=holding,
            skill=args.name,
            nameable=nameable_agent_libraries(config) if args.library else (),
        )
    ]
    try:
        validate_name(args.name, dialect=chosen.dialect)
    except InvalidName as exc:
        raise Failure(str(exc)) from None

    def report_corrupt(copy: Path, reason: str) -> None:
        # Rare: only then is state.db opened, to leave the event a person will look for.
        from skilld.app import report_corrupt_usage
        from skilld.state import StateDB

        with StateDB(config.state.dir / "state.db") as state:
            report_corrupt_usage(state, chosen.name, copy, reason)

    def guard() -> None:
        require_real_project_dir(chosen)  # a link planted since the check above: exit 1

    UsageStore(chosen.dir, on_corrupt=report_corrupt, guard=guard).bump(args.name, args.kind)
    return 0


def _usage_parser(parser: Parser) -> None:
    parser.add_argument("kind", choices=("use", "view", "patch"))
    parser.add_argument("name")
    library_option(parser)
    parser.set_defaults(handler=cmd_usage, needs_app=False)


COMMANDS: CommandTable = {
    "usage": ("record a use, view or patch (for agent hooks)", _usage_parser),
}
