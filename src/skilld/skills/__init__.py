"""Skills on disk: the file format (`document`), names (`names`), where a skill's file lives
(`layout`), a library of them with its ownership rules (`library`; beside it `discovery`,
`ownership`, `history`, `outcomes`, `trigger_repair` and `team_tree`), and the `.usage.json`
sidecar (`usage`). What other packages may use is `__all__`."""

from skilld import lazy_exports

_EXPORTS = {
    **dict.fromkeys(
        [
            "AGENTSKILLS_WHEN_MARKER",
            "LISTING_BUDGETS",
            "InvalidSkill",
            "SkillDoc",
            "SkillParseError",
            "neutralise_file",
            "parse_skill",
            "render_skill",
            "same_text",
            "validate_skill",
        ],
        "document",
    ),
    **dict.fromkeys(["ARCHIVE_DIR", "SKILL_FILE", "find_skill_file"], "layout"),
    **dict.fromkeys(["FileFacts", "SkillEntry"], "discovery"),
    **dict.fromkeys(["Library"], "library"),
    **dict.fromkeys(["HistoryVersion"], "history"),
    **dict.fromkeys(
        [
            "Origin",
            "Refused",
            "Unchanged",
            "WriteFailed",
            "WriteOutcome",
            "Written",
            "refused_or_written",
        ],
        "outcomes",
    ),
    **dict.fromkeys(["BUNDLED_MANIFEST", "HUB_LOCK"], "ownership"),
    **dict.fromkeys(["SharedFile", "SkillChange", "TeamTree", "WrittenFile"], "team_tree"),
    **dict.fromkeys(["break_shell_triggers"], "trigger_repair"),
    **dict.fromkeys(
        [
            "MAX_NAME_LENGTH",
            "NAME_PATTERN",
            "InvalidName",
            "apply_prefix",
            "form_of",
            "is_safe_path_component",
            "validate_name",
        ],
        "names",
    ),
    **dict.fromkeys(
        [
            "ACTIVITY_FIELDS",
            "CORRUPT_PREFIX",
            "COUNT_FIELDS",
            "LOCK_FILE",
            "MAX_USAGE_BYTES",
            "Record",
            "State",
            "TEMP_FILE",
            "USAGE_FILE",
            "USES_BY_DAY",
            "UsageStore",
            "count_of",
            "format_timestamp",
            "happened_at",
            "latest_activity_at",
            "new_record",
            "parse_timestamp",
            "report_row",
            "uses_by_day",
        ],
        "usage",
    ),
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
