"""What a library change came to, and who asked for it: the values its callers record.

A write returns an outcome (`Written`, `Unchanged`, `Refused`, `WriteFailed`) and records
nothing; its caller commits it (`Library.commit`) together with its own bookkeeping.
"""

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:
    from skilld.gitinfo import GitContext
    from skilld.state import StateDB


class Origin(NamedTuple):
    """Who asks for a change, for the event log and provenance."""

    source: str  # "cli", "tool", "evolve", "curator", or a source kind
    session: str | None = None
    first_message: int | None = None
    last_message: int | None = None
    model: str | None = None
    prompt_version: str | None = None
    #: Where the session that taught it worked (a window's), for provenance and team commits.
    git: "GitContext | None" = None
    #: The signatures of the window's failures the change is meant to end (its source
    #: failures, skilld.effect.targets); None when it came from no window's judgement.
    targets: tuple[str, ...] | None = None


# -- what a write came to --------------------------------------------------------------------


class Written(NamedTuple):
    kind: Literal["created", "updated"]
    name: str
    path: Path
    sha256: str
    version: int
    #: The write was this origin's own, made before a crash kept its event from committing.
    recovered: bool = False


class Unchanged(NamedTuple):
    name: str
    path: Path
    sha256: str

    @property
    def kind(self) -> Literal["unchanged"]:
        return "unchanged"


class Refused(NamedTuple):
    """Nothing was written: the skill is not skilld's (`protected`), the cap is reached
    (`cap`), or the skill breaks a rule of the library (`invalid`)."""

    kind: Literal["protected", "cap", "invalid"]
    name: str
    reason: str


class WriteFailed(NamedTuple):
    """This machine could not write (disk full, permissions, something in the way)."""

    name: str
    reason: str

    @property
    def kind(self) -> Literal["failed"]:
        return "failed"


WriteOutcome = Written | Unchanged | Refused | WriteFailed


class Deleted(NamedTuple):
    path: Path
    #: Files a person put beside SKILL.md: never skilld's to remove, left in place.
    kept: tuple[str, ...]


def record_outcome(
    state: "StateDB",
    library: str,
    outcome: WriteOutcome,
    origin: Origin,
    *,
    reason: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> None:
    """Record `outcome` of a write to `library` in the event log (and, for a write, settle its
    provenance).

    Runs in one transaction, joining the caller's: the caller's own bookkeeping (a session
    watermark, a kept proposal) commits with it or not at all.
    """
    common: dict[str, Any] = {
        "library": library,
        "skill": outcome.name,
        "session": origin.session,
        "source": origin.source,
    }
    extra = dict(detail or {})
    if origin.git is not None:
        extra.setdefault("git", origin.git.as_json())
    # What provenance keeps for the current version only, kept on the event for each one.
    if origin.first_message is not None:
        extra.setdefault("messages", [origin.first_message, origin.last_message])
    for key, value in (("model", origin.model), ("prompt_version", origin.prompt_version)):
        if value is not None:
            extra.setdefault(key, value)
    if origin.targets is not None:
        extra.setdefault("targets", list(origin.targets))
    with state.transaction():
        if isinstance(outcome, Written):
            state.settle_provenance(library, outcome.name, outcome.sha256)
            if outcome.recovered:
                extra["recovered"] = "the write's event was lost in a crash"
            state.add_event(
                outcome.kind,
                **common,
                reason=reason,
                detail={
                    "path": str(outcome.path),
                    "sha256": outcome.sha256,
                    "version": outcome.version,
                    **extra,
                },
            )
        elif isinstance(outcome, Unchanged):
            state.add_event(
                "unchanged", **common, reason=reason, detail={"path": str(outcome.path), **extra}
            )
        elif isinstance(outcome, Refused):
            state.add_event(outcome.kind, **common, reason=outcome.reason, detail=extra)
        else:
            state.add_event(
                "error", **common, reason=f"could not write: {outcome.reason}", detail=extra
            )


def refused_or_written(outcome: WriteOutcome) -> Written | Unchanged:
    """A write's outcome, or the error a refused or failed write raises: `Protected` or
    `CapReached` for a refusal, `LibraryError` for the rest."""
    from skilld.errors import CapReached, LibraryError, Protected

    if isinstance(outcome, Refused):
        error = {"protected": Protected, "cap": CapReached}.get(outcome.kind, LibraryError)
        raise error(outcome.reason)
    if isinstance(outcome, WriteFailed):
        raise LibraryError(f"could not write {outcome.name}: {outcome.reason}")
    return outcome
