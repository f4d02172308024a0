"""`skilld skills|usage|events` as a person or an agent hook runs them: real subprocesses."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Workspace


def write_skill(ws: Workspace, name: str, *extra: str) -> int:
    result = ws.cli(
        "skills", "write", name, "--description", f"About {name}.", "--when", "Often.",
        "--content", "1. Step one.\n", *extra,
    )  # fmt: skip
    return result.returncode


def test_write_list_show_as_json(workspace: Workspace) -> None:
    assert write_skill(workspace, "cli-made") == 0
    result = workspace.cli("skills", "list", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert len(rows) == 1
    row = rows[0]
    for key in ("name", "owner", "state", "pinned", "use_count", "view_count", "patch_count",
                "last_activity_at", "path"):  # fmt: skip
        assert key in row
    assert (row["name"], row["owner"], row["state"], row["pinned"]) == (
        "cli-made", "managed", "active", False,
    )  # fmt: skip
    shown = workspace.cli("skills", "show", "cli-made")
    assert shown.returncode == 0
    assert shown.stdout.startswith("---\nname: cli-made\n")


def test_usage_bumps_from_hooks(workspace: Workspace) -> None:
    write_skill(workspace, "hooked")
    for kind in ("use", "use", "view", "patch"):
        assert workspace.cli("usage", kind, "hooked").returncode == 0
    usage = json.loads((workspace.skills / ".usage.json").read_text())
    record = usage["hooked"]
    assert (record["use_count"], record["view_count"], record["patch_count"]) == (2, 1, 1)
    assert record["last_used_at"] and record["created_by"] == "agent"
    row = json.loads(workspace.cli("skills", "list", "--json").stdout)[0]
    assert row["use_count"] == 2 and row["last_activity_at"] is not None


def test_refusals_exit_1_with_one_line(workspace: Workspace) -> None:
    folder = workspace.skills / "handmade"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: handmade\ndescription: Mine.\n---\nbody\n")
    for args in (
        ("skills", "delete", "handmade"),
        ("skills", "archive", "handmade"),
        ("skills", "delete", "no-such-skill"),
        ("skills", "show", "no-such-skill"),
        ("skills", "write", "Bad_Name", "--description", "d", "--content", "c"),
        ("usage", "use", "../escape"),
    ):
        result = workspace.cli(*args)
        assert result.returncode == 1, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert (folder / "SKILL.md").exists()
    protected = workspace.events("protected")
    assert [e["skill"] for e in protected] == ["handmade", "handmade"]


def test_bad_usage_exits_2(workspace: Workspace) -> None:
    assert workspace.cli("skills", "frobnicate").returncode == 2
    assert (
        workspace.cli("skills", "write", "x", "--content", "c").returncode == 2
    )  # no --description
    assert workspace.cli("events", "--since", "yesterday").returncode == 2
    assert workspace.cli("usage", "touch", "x").returncode == 2


def test_pin_archive_restore_history_rollback_delete(workspace: Workspace) -> None:
    write_skill(workspace, "lifecycle")
    assert workspace.cli("skills", "pin", "lifecycle").returncode == 0
    assert workspace.cli("skills", "delete", "lifecycle").returncode == 1  # pinned
    assert workspace.cli("skills", "unpin", "lifecycle").returncode == 0
    result = workspace.cli(
        "skills", "write", "lifecycle", "--description", "About lifecycle.", "--when", "Often.",
        "--content", "1. Step two.\n",
    )  # fmt: skip
    assert result.stdout.startswith("updated")
    history = json.loads(workspace.cli("skills", "history", "lifecycle", "--json").stdout)
    assert len(history) == 1
    assert workspace.cli("skills", "rollback", "lifecycle").returncode == 0
    text = (workspace.skills / "lifecycle" / "SKILL.md").read_text()
    assert "Step one" in text
    assert workspace.cli("skills", "archive", "lifecycle").returncode == 0
    rows = json.loads(workspace.cli("skills", "list", "--json").stdout)
    assert rows[0]["state"] == "archived"
    assert workspace.cli("skills", "restore", "lifecycle").returncode == 0
    assert workspace.cli("skills", "delete", "lifecycle").returncode == 0
    assert not (workspace.skills / "lifecycle").exists()
    kinds = [e["kind"] for e in workspace.events()]
    for kind in ("written", "pinned", "unpinned", "rolled_back", "archived", "restored", "deleted"):
        if kind == "written":
            assert "created" in kinds and "updated" in kinds
        else:
            assert kind in kinds, kind


def test_events_filters(workspace: Workspace) -> None:
    write_skill(workspace, "first-one")
    write_skill(workspace, "second-one")
    result = workspace.cli("events", "--json", "--skill", "second-one")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(e["kind"], e["skill"]) for e in lines] == [("created", "second-one")]
    assert len(workspace.cli("events", "--json", "--limit", "1").stdout.splitlines()) == 1
    recent = workspace.cli("events", "--json", "--since", "1h").stdout.splitlines()
    assert len(recent) == 2


def test_corrupt_usage_file_is_kept_aside_and_reported(workspace: Workspace) -> None:
    write_skill(workspace, "precious")
    assert workspace.cli("skills", "pin", "precious").returncode == 0
    sidecar = workspace.skills / ".usage.json"
    sidecar.write_text('{"precious": {"pinned": true, "use_count": 3}, "broken": ')
    assert workspace.cli("usage", "use", "precious").returncode == 0
    copies = list(Path(workspace.skills).glob(".usage.json.corrupt-*"))
    assert len(copies) == 1
    assert copies[0].read_text().startswith('{"precious"')
    events = workspace.events("usage_corrupt")
    assert len(events) == 1
    record = json.loads(sidecar.read_text())["precious"]
    assert record["pinned"] is True and record["use_count"] == 4
