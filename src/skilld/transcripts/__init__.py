"""Transcripts: where sessions come from and the plain values they are read into.

The rest of skilld builds sources with `build_source` and sees only
`Source.scan` results: `ScanResult`, `SessionRead`, `Message`, `ToolCall`, and the skill
signals `skill_signals` derives from a read; `StoredKeys` turns a source's own session keys
into the keys state.db stores, unique across sources. Each source kind lives in its own module
(`jsonl`, `claude_code`, `codex`, `hermes`, the `dsh` package), imported only when configured;
modules named `_*` are internal to this package.
"""

from skilld import lazy_exports

_EXPORTS = {
    **dict.fromkeys(
        [
            "Cursor",
            "Message",
            "Refusal",
            "Role",
            "ScanResult",
            "SessionRead",
            "SkillSignal",
            "Source",
            "ToolCall",
        ],
        "model",
    ),
    "StoredKeys": "identity",
    "cut_text": "normalise",
    "build_source": "registry",
    "skill_signals": "signals",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
