"""The evolution loop: a tick (`supervisor`), its report (`report`), what sessions hold and what
windows that makes (`backlog`), the prompt (`prompt`), the reply contract (`contract`), the
review queue (`review`), what approving a proposal writes (`approval`), and replaying history
into a sandbox (`replay`). Modules named `_*` (the gates, the judging of a reply, similarity)
are this package's own."""

from skilld import lazy_exports

_EXPORTS = {
    **dict.fromkeys(["approved_text"], "approval"),
    **dict.fromkeys(["PROMPT_CHARS_KEY", "backlog", "ready_windows", "summary_of"], "backlog"),
    **dict.fromkeys(["RAW_REPLY_LIMIT", "extract_json_object"], "contract"),
    **dict.fromkeys(["PROMPT_VERSION", "SYSTEM_PROMPT", "build_messages"], "prompt"),
    **dict.fromkeys(
        [
            "ReplayError",
            "ReplayOptions",
            "ReplayReport",
            "check_out_dir",
            "default_out_dir",
            "run_replay",
        ],
        "replay",
    ),
    **dict.fromkeys(
        [
            "DAILY_SPEND_DAYS",
            "DAILY_SPEND_KEY",
            "HEALTH_KEY",
            "SPEND_KEY",
            "TOKENS_KEY",
            "TickReport",
            "WindowRecord",
        ],
        "report",
    ),
    **dict.fromkeys(["ReviewQueue", "Staged"], "review"),
    **dict.fromkeys(["download_hold", "risky_patterns"], "safety"),
    **dict.fromkeys(["Evolver"], "supervisor"),
    **dict.fromkeys(["delimit"], "window"),
    **dict.fromkeys(["SourceBinding", "bind_sources", "llm_settings"], "wiring"),
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
