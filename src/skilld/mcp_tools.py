"""The four tools `skilld mcp` serves, over one library.

`skill_write`, `skill_delete`, `skill_list` and `skill_view` act under the same ownership rules
as the CLI (every change goes through `Library`, attributed to source `tool` in the event log).
A refusal (a human or pinned skill, a bad name, the cap) comes back as the tool's error
carrying the reason; it never ends the server.

An agent writes skills from its own context, which can hold tool output with secrets in it:
what `skill_write` receives is redacted like a learned skill, and new skills count against
the library's cap like learned ones. That context can hold anyone's instructions too (a web
page, a README): a skill that downloads and runs code is staged for a person, as a learned
one is even with `publish = "auto"` (`skilld review`), never written live.

The server (`skilld.mcp_server`) imports this module on the first tool call, not before its
handshake: the library code, SQLite and the redaction patterns are most of skilld's start-up.
"""

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from skilld.app import open_app
from skilld.config import Config
from skilld.errors import LibraryError, SkilldError
from skilld.evolve.review import ReviewQueue
from skilld.evolve.safety import download_hold
from skilld.mcp_server import Refused
from skilld.redact import merge_counts, redact
from skilld.reports.listing import tool_skill_rows
from skilld.skills.document import SkillDoc, validate_skill
from skilld.skills.library import Library
from skilld.skills.outcomes import Origin, Written, refused_or_written
from skilld.skills.outcomes import Refused as WriteRefused

TOOL = Origin(source="tool")


class SkillTools:
    """The tools as plain methods over one library; each call opens the state afresh, so the
    server sees what the daemon and the CLI changed in the meantime."""

    def __init__(self, config: Config, library: str) -> None:
        self.config = config
        self.library = library

    def __call__(self, tool: str, arguments: Mapping[str, str | None]) -> dict[str, Any] | str:
        """Run `tool` (a name from `mcp_server.TOOLS`) with its checked arguments."""
        name = arguments.get("name") or ""
        if tool == "skill_write":
            return self.write(
                name,
                arguments["description"] or "",
                arguments["content"] or "",
                arguments["whenToUse"],
            )
        if tool == "skill_delete":
            return self.delete(name)
        if tool == "skill_list":
            return self.list()
        if tool == "skill_view":
            return self.view(name)
        raise Refused(f"unknown tool: {tool}")

    def write(
        self, name: str, description: str, content: str, when_to_use: str | None = None
    ) -> dict[str, Any]:
        redactions = [redact(text) for text in (description, when_to_use or "", content)]
        counts = merge_counts(*(r.counts for r in redactions))
        description, when_to_use, content = (r.text for r in redactions)
        doc = SkillDoc(
            name=name, description=description, when_to_use=when_to_use or None, body=content
        )
        with self._library() as library:
            if counts:
                library.state.add_event(
                    "redacted",
                    library=library.name,
                    skill=name,
                    source=TOOL.source,
                    detail={"counts": counts, "stage": "tool"},
                )
            held = download_hold(doc.body, doc.description, doc.when_to_use or "")
            if held is not None:
                return {**self._stage(library, doc, held), "redacted": counts}
            result = library.apply(doc, TOOL)
        return {
            "outcome": result.kind if isinstance(result, Written) else "unchanged",
            "name": result.name,
            "path": str(result.path),
            "redacted": counts,
        }

    def _stage(self, library: Library, doc: SkillDoc, held: str) -> dict[str, Any]:
        """Stage `doc` for a person's approval because of `held`, with a `staged` event. What
        the write would refuse (a bad name or field, a skill that is not skilld's to change)
        is refused as the write refuses it, event and all: a person could never approve it."""
        refusal: WriteRefused | None = None
        try:
            doc = doc._replace(name=library.check_name(doc.name))
            validate_skill(doc, library.form, max_content_chars=library.max_content_chars)
        except (LibraryError, ValueError) as exc:
            refusal = WriteRefused("invalid", doc.name, str(exc))
        name = doc.name
        existing = library.get(name)
        if refusal is None and existing is not None:
            protection = library.protection(existing, library.usage_record(existing.name))
            if protection is not None:
                refusal = WriteRefused("protected", name, f"{protection}: not staged ({held})")
        if refusal is not None:
            library.commit(refusal, TOOL)
            refused_or_written(refusal)  # raises Protected or LibraryError, as a write would
        path = ReviewQueue(self.config.state.dir / "pending").stage(
            doc,
            TOOL,
            library=library.name,
            storage_key=library.spec.storage_key,
            reason="written with the MCP tool skill_write",
            held_because=held,
        )
        library.state.add_event(
            "staged",
            library=library.name,
            skill=name,
            source=TOOL.source,
            reason=held,
            detail={"path": str(path), "target": str(library.root / name)},
        )
        return {
            "outcome": "staged",
            "name": name,
            "path": str(path),
            "reason": f"{held}; a person approves it with `skilld review approve {name}`",
        }

    def delete(self, name: str) -> dict[str, Any]:
        with self._library() as library:
            deleted = library.delete(name, TOOL)
        return {"deleted": name, "path": str(deleted.path), "kept": list(deleted.kept)}

    def list(self) -> dict[str, Any]:
        problems: list[str] = []
        with self._library() as library:
            skills = tool_skill_rows(library, problems)
        return {"skills": skills, "problems": problems} if problems else {"skills": skills}

    def view(self, name: str) -> str:
        with self._library() as library:
            entry = library.get(name)
            if entry is None:
                raise Refused(f"no skill named {name}")
            if entry.error:  # e.g. a link out of the skills dir: never read through it
                raise Refused(f"{entry.name} is broken: {entry.error}")
            text = entry.text()
            library.usage.bump(entry.name, "view")
            verdict = self._verdict_line(library, entry.name)
        return text if verdict is None else f"{text.rstrip()}\n\n{verdict}\n"

    def _verdict_line(self, library: Library, name: str) -> str | None:
        """`skilld effect: <verdict>: <evidence>` for a skill skilld learned, else None."""
        from skilld.effect.report import effect_records

        records = effect_records(
            library.state.conn,
            [library.name],
            min_exposures=self.config.effect.min_exposures,
            names=[(library.name, name)],
        )
        if not records:
            return None
        outcome = records[0].outcome
        return f"skilld effect: {outcome.verdict}: {outcome.evidence}"

    @contextlib.contextmanager
    def _library(self) -> Iterator[Library]:
        try:
            with open_app(self.config, requested=self.library) as app:
                yield app.select(self.library)
        except SkilldError as exc:
            raise Refused(str(exc)) from None
        except OSError as exc:
            where = f": {exc.filename}" if exc.filename else ""
            raise Refused(f"{exc.strerror or exc}{where}") from None
