"""Staged proposals awaiting a person: `<state_dir>/pending/<name>.json`.

`publish = "review"` stages every proposal here; risky content is staged even in auto mode.
Approving writes through the library, under the same ownership rules as any other write.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from skilld.fsutil import atomic_write, check_component
from skilld.skills.document import SkillDoc
from skilld.skills.library import Library, Origin, WriteResult
from skilld.state import utc_now_iso


@dataclass(frozen=True, slots=True)
class Staged:
    name: str
    description: str
    when_to_use: str | None
    content: str
    reason: str  # why the model proposed it
    held_because: str  # "review mode" or the risky patterns found
    origin: dict[str, Any]
    staged_at: str

    def doc(self) -> SkillDoc:
        return SkillDoc(
            name=self.name,
            description=self.description,
            when_to_use=self.when_to_use,
            body=self.content,
        )


class ReviewQueue:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, name: str) -> Path:
        return self.folder / f"{check_component(name)}.json"

    def stage(self, doc: SkillDoc, origin: Origin, *, reason: str, held_because: str) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        staged = Staged(
            name=doc.name,
            description=doc.description,
            when_to_use=doc.when_to_use,
            content=doc.body,
            reason=reason,
            held_because=held_because,
            origin=asdict(origin),
            staged_at=utc_now_iso(),
        )
        path = self._path(doc.name)
        atomic_write(path, json.dumps(asdict(staged), ensure_ascii=False, indent=2) + "\n")
        return path

    def list(self) -> list[Staged]:
        staged = []
        try:
            names = sorted(os.listdir(self.folder))
        except FileNotFoundError:
            return []
        for file_name in names:
            if file_name.endswith(".json") and not file_name.startswith("."):
                item = self.get(file_name[:-5])
                if item is not None:
                    staged.append(item)
        return staged

    def get(self, name: str) -> Staged | None:
        try:
            data = json.loads(self._path(name).read_text(encoding="utf-8"))
            return Staged(**data)
        except (OSError, ValueError, TypeError):
            return None

    def approve(self, name: str, library: Library, *, cap: int | None = None) -> WriteResult:
        staged = self.get(name)
        if staged is None:
            raise KeyError(name)
        origin = Origin(**{**staged.origin, "source": "review"})
        result = library.write(staged.doc(), origin, cap=cap)
        library.state.add_event(
            "approved", skill=name, source="cli", detail={"outcome": result.outcome}
        )
        self._path(name).unlink(missing_ok=True)
        return result

    def reject(self, name: str, library: Library) -> None:
        path = self._path(name)
        if not path.exists():
            raise KeyError(name)
        path.unlink()
        library.state.add_event("rejected", skill=name, source="cli")
