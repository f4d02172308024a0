"""`skilld curate`: the curator's lifecycle pass (and, opted in, LLM consolidation) now."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from skilld.commands.common import CommandTable, Failure, Parser, print_json_line, terminal_text

if TYPE_CHECKING:
    from skilld.app import App
    from skilld.curator.consolidate import ConsolidationReport
    from skilld.curator.passes import LifecycleReport
    from skilld.curator.schedule import CuratorRun


def cmd_curate(app: App, args: argparse.Namespace) -> int:
    # Imported here so that every other `skilld` command starts without the LLM client.
    import anyio

    from skilld.curator.schedule import curate, utc_now
    from skilld.evolve.wiring import llm_settings
    from skilld.llm import LLMClient

    consolidating = args.consolidate or app.config.curator.consolidate
    now = utc_now()
    libraries = [app.select(args.library)] if args.library else None

    async def run() -> CuratorRun:
        if not consolidating:
            return await curate(app, now=now, dry_run=args.dry_run, libraries=libraries)
        try:
            client = LLMClient(llm_settings(app.config))
        except ValueError as exc:
            raise Failure(f"llm.base_url: {exc}") from None
        async with client as llm:
            return await curate(app, now=now, dry_run=args.dry_run, llm=llm, libraries=libraries)

    result = anyio.run(run)
    if args.json:
        print_json_line(result.as_dict())
    else:
        print_run(result)
    for consolidation in result.consolidation:
        if consolidation.status in ("error", "invalid"):
            raise Failure(f"consolidation {consolidation.status}: {consolidation.reason}")
    return 0


def print_run(run: CuratorRun) -> None:
    for lifecycle in run.lifecycle:
        print_lifecycle(lifecycle, several=len(run.lifecycle) > 1)
    for consolidation in run.consolidation:
        print_consolidation(consolidation)
    if run.report_path is not None:
        print(f"report: {run.report_path}")


def print_lifecycle(lifecycle: LifecycleReport, *, several: bool) -> None:
    would = "would be " if lifecycle.dry_run else ""
    if several:
        print(f"library {lifecycle.library}:")
    if lifecycle.refused is not None:
        print(terminal_text(f"{lifecycle.refused}: nothing moved"))
        return
    for t in lifecycle.transitions:
        print(f"{would}{t.kind:<12} {t.name:<32} {t.reason}")
    for name in lifecycle.disabled:
        print(f"{would}{'hidden':<12} {name:<32} disable-model-invocation: true")
    for name in lifecycle.enabled:
        print(f"{would}{'shown':<12} {name:<32} disable-model-invocation removed")
    for failure in lifecycle.failures:
        print(f"{'failed':<12} {failure.name:<32} {failure.action}: {failure.reason}")
    for worse in lifecycle.worse:
        print(f"{'worse':<12} {worse['name']:<32} kept for you to judge: {worse['evidence']}")
    counts: dict[str, int] = {}
    for t in lifecycle.transitions:
        counts[t.kind] = counts.get(t.kind, 0) + 1
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "no transitions"
    print(
        f"{lifecycle.skills_seen} skill{'' if lifecycle.skills_seen == 1 else 's'},"
        f" {lifecycle.managed} managed: {summary}"
        + (" (dry run: nothing changed)" if lifecycle.dry_run else "")
    )


def print_consolidation(consolidation: ConsolidationReport) -> None:
    print(f"consolidation: {consolidation.status}" + _reason(consolidation.reason))
    for outcome in consolidation.outcomes:
        detail = outcome.detail
        what = (
            f"into={detail['into']} from={','.join(detail.get('from', []))}"
            if outcome.action == "merge"
            else " ".join(outcome.names)
        )
        print(f"  {outcome.status:<8} {outcome.action:<8} {what}{_reason(outcome.reason)}")


def _reason(reason: str | None) -> str:
    return f" ({reason})" if reason else ""


def _curate_parser(parser: Parser) -> None:
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would change; change nothing"
    )
    parser.add_argument(
        "--consolidate", action="store_true", help="also ask the LLM to merge and prune skills"
    )
    parser.add_argument("--json", action="store_true", help="the run report as JSON")
    parser.add_argument("--library", help="only this library (default: every library)")
    parser.set_defaults(handler=cmd_curate)


COMMANDS: CommandTable = {
    "curate": ("mark stale skills, archive old ones, optionally consolidate (LLM)", _curate_parser),
}
