"""Staged proposals awaiting a person: `<state_dir>/pending/<library>/<name>.json`.

`publish = "review"` stages every proposal here; risky content is staged even in auto mode, and
so is a project skill for a project skilld may not write into. Approving writes through the
library, under the same ownership rules as any other write.
"""

# Annotations are not postponed here: a NamedTuple's string annotations are compiled (typing's
# ForwardRef), and the first `compile()` in a process builds Python's AST types, a millisecond
# of a one-shot command's start (tests/test_startup.py checks that none compiles).
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from skilld.fsutil import PRIVATE_FILE_MODE, atomic_write, check_component, private_dir
from skilld.skills.document import SkillDoc
from skilld.state import utc_now_iso

if TYPE_CHECKING:
    from skilld.skills.outcomes import Origin


class Staged(NamedTuple):
    name: str
    description: str
    when_to_use: str | None
    content: str
    reason: str  # why the model proposed it
    held_because: str  # "review mode", the risky patterns found, or "project not allowed"
    origin: dict[str, Any]
    staged_at: str
    library: str = ""
    #: For a project skill: the project root whose skills dir it was meant for.
    project_root: str | None = None

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

    def _path(self, storage_key: str, name: str) -> Path:
        return self.folder / check_component(storage_key) / f"{check_component(name)}.json"

    def stage(
        self,
        doc: SkillDoc,
        origin: "Origin",
        *,
        library: str,
        storage_key: str,
        reason: str,
        held_because: str,
        project_root: Path | None = None,
    ) -> Path:
        staged = Staged(
            name=doc.name,
            description=doc.description,
            when_to_use=doc.when_to_use,
            content=doc.body,
            reason=reason,
            held_because=held_because,
            origin={**origin._asdict(), "git": origin.git.as_json() if origin.git else None},
            staged_at=utc_now_iso(),
            library=library,
            project_root=str(project_root) if project_root is not None else None,
        )
        path = self._path(storage_key, doc.name)
        private_dir(path.parent)
        text = json.dumps(staged._asdict(), ensure_ascii=False, indent=2) + "\n"
        atomic_write(path, text, mode=PRIVATE_FILE_MODE)
        return path

    def staged(self) -> list[tuple[Path, Staged]]:
        """Every staged proposal with its file, by library then name."""
        staged = []
        for file in sorted(self._files()):
            item = _read(file)
            if item is not None:
                staged.append((file, item))
        return staged

    def find(self, name: str) -> list[tuple[Path, Staged]]:
        return [(file, item) for file, item in self.staged() if item.name == name]

    def remove(self, file: Path) -> None:
        file.unlink(missing_ok=True)

    def _files(self) -> list[Path]:
        try:
            folders = list(os.scandir(self.folder))
        except FileNotFoundError:
            return []
        files = []
        for entry in folders:
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                files += [
                    Path(child.path)
                    for child in os.scandir(entry.path)
                    if child.name.endswith(".json") and not child.name.startswith(".")
                ]
            elif entry.name.endswith(".json"):
                files.append(Path(entry.path))  # staged before libraries existed
        return files


def _read(file: Path) -> Staged | None:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        return Staged(**data)
    except (OSError, ValueError, TypeError):
        return None
