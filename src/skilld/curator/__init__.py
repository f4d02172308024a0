"""The curator: when it runs (`schedule`), the lifecycle pass (`passes`, deciding with the pure
`_lifecycle`), the optional LLM consolidation (`consolidate`) and the holdout step that
withholds a learned skill on its blocks (`holdout`)."""

from skilld import lazy_exports

_EXPORTS = {
    **dict.fromkeys(["ConsolidationReport", "consolidate"], "consolidate"),
    **dict.fromkeys(
        ["holdout_overview", "library_figure", "run_holdout", "stop_holdout", "withheld_now"],
        "holdout",
    ),
    **dict.fromkeys(["CURATOR", "LifecycleReport", "read_last_run", "run_lifecycle"], "passes"),
    **dict.fromkeys(["CuratorRun", "ScheduledCurator", "curate", "utc_now"], "schedule"),
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
