"""Transcripts: where sessions come from and the plain values they are read into.

The rest of skilld builds sources with `build_source` and sees only
`Source.scan` results: `ScanResult`, `SessionRead`, `Message`, `ToolCall`, and the skill
signals `skill_signals` derives from a read. Each source kind lives in its own module (`jsonl`,
`claude_code`, `codex`, `hermes`, the `dsh` package), imported only when configured; modules
named `_*` are internal to this package.
"""

from skilld.transcripts.model import (
    Cursor,
    Message,
    Role,
    ScanResult,
    SessionRead,
    Source,
    ToolCall,
)
from skilld.transcripts.normalise import cut_text
from skilld.transcripts.registry import build_source
from skilld.transcripts.signals import SkillSignal, skill_signals

__all__ = [
    "Cursor",
    "Message",
    "Role",
    "ScanResult",
    "SessionRead",
    "SkillSignal",
    "Source",
    "ToolCall",
    "build_source",
    "cut_text",
    "skill_signals",
]
