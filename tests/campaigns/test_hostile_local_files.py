"""Security campaign, hostile local files (issue 34): what a file planted in a skills dir can
make skilld do.

Planted as skills: a FIFO, a socket, a link to `/dev/zero`, a 1 GB sparse file, bytes that
are not UTF-8, YAML frontmatter nested 100,000 deep, escape sequences (OSC 52, clear-screen,
a window title, an 8-bit CSI) in a file and in a folder's name, and folders nested far below
the depth discovery walks. Every surface that reads skills meets them as a real process with
a deadline: discovery (`skills list`, text and JSON), `skills show` of each, `once` learning
a new skill, an MCP session (`skill_list`, `skill_view` of each) and the panel over HTTP
(every page, each skill's page, the search, and a review of a proposal for each).

Invariants: nothing hangs; no process's peak RSS nears the sparse file's size; each special,
oversized or non-UTF-8 file is listed as broken and never read; no page answers 5xx; no raw
control character reaches a terminal (the CLI's output; MCP's is JSON for a client, the
panel's HTML for a browser); learning goes on. Normal size plants each kind once;
`--full` plants ten of each and nests the folders 400 deep.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import Workspace, conversation
from tests.fakellm import FakeLLM, skill_reply
from tests.hostile_files import (
    KINDS,
    RSS_LIMIT_KIB,
    TITLE,
    Measured,
    mcp_lines,
    mcp_results,
    measured,
    page_status,
    plant,
    plant_deep_folders,
    result_text,
    running_panel,
)
from tests.test_web import stage

RAW_CONTROLS = ("\x1b", "\x07", "\x9b")
PAGES = ("/", "/skills", "/review", "/events", "/curator", "/skills?q=zzz", "/skills?q=huge")


@dataclass
class Tally:
    checks: int = 0
    hung: list[str] = field(default_factory=list)
    peak_kib: int = 0
    pages: int = 0
    pages_failed: list[str] = field(default_factory=list)
    raw_controls: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)

    def run(self, what: str, result: Measured, *, terminal: bool = True) -> Measured:
        """Count `result`; with `terminal`, what it printed is what a person's terminal shows
        (MCP's stdout is JSON for a client, never a terminal)."""
        self.checks += 1
        self.peak_kib = max(self.peak_kib, result.peak_kib)
        if result.hung:
            self.hung.append(what)
        if "Traceback" in result.stderr:
            self.wrong.append(f"{what}: {result.stderr[-300:]}")
        self.printed(what, (result.stdout if terminal else "") + result.stderr)
        return result

    def printed(self, what: str, text: str) -> None:
        if any(raw in text for raw in RAW_CONTROLS):
            self.raw_controls.append(what)

    def page(self, client: Any, path: str) -> None:
        self.pages += 1
        status = page_status(client, path)
        if status is None or status >= 500:
            self.pages_failed.append(f"{path}: {status}")


def planted(skills: Path, copies: int, depth: int) -> dict[str, str]:
    """Every hostile file, by skill name -> its kind."""
    names = {}
    for kind in KINDS:
        for copy in range(copies):
            name = kind if copy == 0 else f"{kind}-{copy}"
            plant(skills, kind, name)
            names[name] = kind
    plant_deep_folders(skills, depth)
    (skills / f"title{TITLE}").mkdir()
    (skills / f"title{TITLE}" / "SKILL.md").write_text(
        "---\nname: title\ndescription: A hostile folder name.\n---\nx\n"
    )
    return names


def test_hostile_local_files_hang_nothing_and_break_no_page(
    tmp_path: Path, fake_llm: FakeLLM, full_size: bool, campaign_figures: Callable[..., str]
) -> None:
    copies, depth = (10, 400) if full_size else (1, 60)
    workspace = Workspace(tmp_path / "ws", llm_url=fake_llm.base_url)
    workspace.skills.mkdir(parents=True)
    workspace.sessions.mkdir()
    names = planted(workspace.skills, copies, depth)
    workspace.write_config()
    tally = Tally()

    # Discovery.
    listed = tally.run("skills list --json", measured(workspace, "skills", "list", "--json"))
    rows = {row["name"]: row for row in json.loads(listed.stdout or "[]")}
    for name, kind in names.items():
        reason = KINDS[kind][1]
        broken = (rows.get(name) or {}).get("broken")
        if (reason is None and broken is not None) or (reason and reason not in (broken or "")):
            tally.wrong.append(f"skills list: {name}: {broken!r}")
    tally.run("skills list", measured(workspace, "skills", "list"))
    for name, kind in names.items():
        shown = tally.run(f"skills show {name}", measured(workspace, "skills", "show", name))
        if KINDS[kind][2] is not None and shown.returncode != 1:
            tally.wrong.append(f"skills show {name}: exited {shown.returncode}")

    # Learning goes on.
    workspace.add_session("s1", conversation("the hostile files"))
    fake_llm.push(skill_reply("survive-hostile-files"))
    once = tally.run("once", measured(workspace, "once"))
    if once.returncode != 0 or not (workspace.skills / "survive-hostile-files").is_dir():
        tally.wrong.append(f"once: exited {once.returncode}: {once.stderr[-300:]}")

    # An MCP client.
    calls = [("skill_list", {})] + [("skill_view", {"name": name}) for name in names]
    session = tally.run("mcp", measured(workspace, "mcp", stdin=mcp_lines(*calls)), terminal=False)
    results = mcp_results(session.stdout)
    for number, name in enumerate(names, start=3):
        result = results.get(number, {})
        parsed_reason = KINDS[names[name]][2]
        if parsed_reason is not None and not result.get("isError"):
            tally.wrong.append(f"mcp skill_view {name}: {result_text(result)[:200]!r}")

    # The panel, over HTTP.
    for name in names:
        stage(workspace, name, f"1. A proposal for {name}.\n")
    with running_panel(workspace) as running:
        panel = running.client
        for path in PAGES:
            tally.page(panel, path)
        for name in names:
            tally.page(panel, f"/skills/default/{name}")
        tally.peak_kib = max(tally.peak_kib, running.peak_rss_kib())

    figures = campaign_figures(
        "security hostile local files",
        cases=len(names) + 2,  # the planted files, the deep folders, the hostile folder name
        checks=tally.checks + tally.pages,
        hung=len(tally.hung),
        peak_rss_mib=round(tally.peak_kib / 1024),
        pages=tally.pages,
        pages_failed=len(tally.pages_failed),
        raw_controls_printed=len(tally.raw_controls),
        wrong=len(tally.wrong),
    )
    assert tally.hung == [], figures
    assert tally.peak_kib < RSS_LIMIT_KIB, figures
    assert tally.pages_failed == [], tally.pages_failed
    assert tally.raw_controls == [], tally.raw_controls
    assert tally.wrong == [], tally.wrong
    assert os.path.isdir(workspace.skills / "survive-hostile-files")
