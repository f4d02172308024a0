"""Text in a skill that would act rather than be read: the load-time shell triggers an agent
runs as it loads a skill, and the escape sequences a terminal runs as it prints one.

* `neutralise_shell_injection(text)`: every trigger broken, visibly and harmlessly (a space
  between `!` and the backtick, a backslash between a fence and its `!`); the one neutraliser,
  applied by the renderer (`document.render_skill`) to every field of every dialect. A fence
  opens with three backticks or, in CommonMark, three tildes: `~~~!` is the same trigger.
* `neutralise_file(data)`: the same for bytes skilld did not render just now (a saved version
  a rollback restores), in place.
* `control_character(label, text, allowed=...)`: why `text` may not be written (it holds a C0
  or C1 control character, or DEL, other than `allowed`), or None: OSC 52 writes the clipboard
  of whoever prints the skill, others clear the screen or retitle the window.

Why the triggers exist and who runs them: `skilld.skills.document`'s docstring.
"""

import re

# Patterns are compiled on first use (by `re`'s cache).
_FENCE_TRIGGER = r"(```+|~~~+)!"
#: Claude Code's and Hermes's inline trigger: `!` directly before a backtick.
_INLINE_TRIGGER = "!`"
#: C0 controls, DEL and C1 controls (Unicode category Cc).
_CONTROL_CHARACTER = r"[\x00-\x1f\x7f-\x9f]"


def neutralise_shell_injection(text: str) -> str:
    """Break every load-time shell trigger in ``text`` (idempotent).

    The one neutraliser: the renderer applies it to every field of every dialect, and
    `neutralise_file` to bytes a rollback brings back."""
    return re.compile(_FENCE_TRIGGER).sub(r"\1\\!", text.replace(_INLINE_TRIGGER, "! `"))


def neutralise_file(data: bytes) -> bytes:
    """A skill file's bytes with no live shell trigger: the same bytes when it holds none.

    For bytes skilld did not render just now (a saved version a rollback restores, possibly
    written by an older skilld or a teammate): the triggers are broken in place, the rest of
    the file is kept byte for byte, so its frontmatter, even one that does not parse, stays
    as it was."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data  # no agent loads it as a skill; nothing in it runs
    neutral = neutralise_shell_injection(text)
    return data if neutral == text else neutral.encode("utf-8")


def control_character(label: str, text: str, *, allowed: str = "\t\n") -> str | None:
    """Why `text` (the field `label`) may not be written: the first control character in it
    other than `allowed`. None when it holds none."""
    found = re.search(_CONTROL_CHARACTER, text.translate(dict.fromkeys(map(ord, allowed))))
    if found is None:
        return None
    return (
        f"{label} contains U+{ord(found.group()):04X}, a control character; only newline and "
        "tab are allowed"
    )
