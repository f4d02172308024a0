"""Characters a person does not see but an agent reads, so that what a person reads of a skill
would not be what the agent reads: bidirectional controls that reorder the text on screen
(Trojan Source), zero-width characters that split a word or a command invisibly, tag
characters that spell out a whole instruction no one sees (ASCII smuggling), runs of
variation selectors that carry hidden bytes.

*Hidden* (`HIDDEN`): every format character (Unicode category Cf) but the prepended
concatenation marks (U+0600-U+0605, U+06DD, U+070F, U+0890, U+0891, U+08E2, U+110BD,
U+110CD: number signs, drawn over the digits they precede), the invisible letters and marks
U+034F, U+115F, U+1160, U+17B4, U+17B5, U+3164, U+FFA0, and the variation selectors. Each
is hidden unless it is part of ordinary text:

* ZWNJ U+200C and ZWJ U+200D between two letters or marks that are not ASCII: Persian,
  Arabic and Indic text break or join ligatures with them;
* ZWJ between two emoji (a ZWJ sequence: the emoji before it may carry a skin tone or
  U+FE0F);
* one variation selector right after a character that is not space, hidden, or a
  selector itself (an emoji's presentation, a keycap, an ideographic variant): a run of them
  is how bytes are hidden;
* the tag characters of an emoji tag sequence: U+1F3F4, two to six tag letters or digits,
  U+E007F (the flags of England, Scotland, Wales).

Bidirectional controls (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069), U+200B,
U+2060-U+2064, U+FEFF and the soft hyphen U+00AD are never ordinary here: a skill is
Markdown a person reads, and none of them is needed to write it.

* `hidden_character(label, text)`: why a field may not hold `text`, naming the first hidden
  character; for the names, descriptions and when-to-use texts a listing shows in one line.
* `make_visible(text)`: each hidden character replaced with a marker a person sees and the
  agent reads alike, `<U+202E>`; for bodies and metadata (idempotent: a marker is ASCII).
"""

import re
from collections.abc import Iterator

#: Format characters (Cf, Unicode 15) but the prepended concatenation marks, the invisible
#: letters and marks, and the variation selectors, as a regex character class.
HIDDEN = (
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
    "\U000e0020-\U000e007f\U000e0100-\U000e01ef]"
)
ZWNJ, ZWJ = "\u200c", "\u200d"
#: An emoji tag sequence: the waving black flag, a subdivision's tag letters, CANCEL TAG.
_TAG_SEQUENCE = "\U0001f3f4[\U000e0030-\U000e0039\U000e0061-\U000e007a]{2,6}\U000e007f"
_SELECTOR = "[\u180b-\u180d\u180f\ufe00-\ufe0f\U000e0100-\U000e01ef]"
#: What an emoji may end with before the ZWJ that joins it to the next: a skin tone, U+FE0F.
_EMOJI_ENDINGS = frozenset(["\ufe0f", *map(chr, range(0x1F3FB, 0x1F400))])


def hidden_positions(text: str) -> Iterator[int]:
    """The index of every hidden character in `text`, in order."""
    hidden = re.compile(HIDDEN)
    first = hidden.search(text)
    if first is None:
        return
    in_flags = {
        index
        for found in re.compile(_TAG_SEQUENCE).finditer(text)
        for index in range(found.start() + 1, found.end())
    }
    for found in hidden.finditer(text, first.start()):
        index = found.start()
        if index not in in_flags and not _ordinary(text, index):
            yield index


def _ordinary(text: str, index: int) -> bool:
    """Whether the candidate at `index` is part of ordinary text (the module's rules)."""
    character = text[index]
    before = text[index - 1] if index > 0 else ""
    after = text[index + 1] if index + 1 < len(text) else ""
    if character in (ZWNJ, ZWJ):
        return _joins_script(before, after) or (character == ZWJ and _joins_emoji(before, after))
    if re.compile(_SELECTOR).fullmatch(character):
        return bool(before) and not before.isspace() and re.compile(HIDDEN).match(before) is None
    return False


def _joins_script(before: str, after: str) -> bool:
    import unicodedata  # only for a joiner: no listing needs the C extension

    return all(
        side and not side.isascii() and unicodedata.category(side)[0] in "LM"
        for side in (before, after)
    )


def _joins_emoji(before: str, after: str) -> bool:
    import unicodedata

    def emoji(character: str) -> bool:
        return bool(character) and unicodedata.category(character) == "So"

    return (emoji(before) or before in _EMOJI_ENDINGS) and emoji(after)


def hidden_character(label: str, text: str) -> str | None:
    """Why the field `label` may not hold `text`: the first hidden character in it, named.
    None when it holds none."""
    index = next(hidden_positions(text), None)
    if index is None:
        return None
    import unicodedata

    character = text[index]
    name = unicodedata.name(character, "a format character")
    return (
        f"{label} contains U+{ord(character):04X} {name}, an invisible character: a person "
        "would read other text than the agent does"
    )


def make_visible(text: str) -> str:
    """`text` with each hidden character replaced by its marker, `<U+XXXX>`."""
    positions = list(hidden_positions(text))
    if not positions:
        return text
    parts, start = [], 0
    for index in positions:
        parts += [text[start:index], f"<U+{ord(text[index]):04X}>"]
        start = index + 1
    parts.append(text[start:])
    return "".join(parts)
