"""How well skilld's failure records agree with a hand-labelled corpus of real sessions.

    python bench/failures_quality.py --sessions /work/corpus --labels bench/corpus/labels.jsonl
    python bench/failures_quality.py --sessions DIR --draw OUT.jsonl   # draw a sample to label
    python bench/failures_quality.py --smoke                           # a tiny corpus it writes

Every session file under DIR is read by skilld's own reader for its agent (Claude Code or Codex,
told from its first line) and its messages go through `skilld.effect.extract.extract`, as the
tick records them (`skilld.effect.record.record_session_read`). Each tool result is then one
call: its file (relative to DIR), line, the agent's call id, the command, and the failure skilld
records for it, if any. Labels (bench/corpus/README.md) are joined on (path, call id).

The figures: precision (of the labelled calls skilld counts as real/hook/masked failures, the
share labelled true failures of a counted class), recall (of the labelled true failures, the
share skilld counts; raw over the labels, and weighted by how the sample was drawn), class
accuracy, the share of signatures holding the labelled command head and error key phrase,
grouping (hand-found recurrences shown as one `failures` row; distinct failures merged into
one), and rejections carrying the user's words counted as real.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from skilld.config import EvolveConfig
from skilld.effect.extract import Failure, extract
from skilld.transcripts.registry import build_source

#: The classes a skill's effect counts (DESIGN.md §13): `masked` is counted like `real`.
COUNTED = frozenset({"real", "hook", "masked"})
#: Words that make an unrecorded call worth a look: each one of these is labelled.
ERROR_WORDS = re.compile(
    r"\b(error|errors|fatal|failed|failure|traceback|exception|denied|not found|"
    r"no such file|cannot|could not|permission)\b",
    re.IGNORECASE,
)
#: How much of a result is searched for error words: its opening, where a command says it
#: failed (a file's text further down mentions errors without any failing).
ERROR_WINDOW = 600
STRATA = ("recorded", "unrecorded-error-words", "unrecorded")


class Call(NamedTuple):
    path: str  # relative to the sessions folder
    line: int | None  # 1-based line of the result in the file
    call_id: str | None
    tool: str
    arguments: str
    output: str
    failures: tuple[Failure, ...]  # what skilld records for this call (a replay: several)

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.path, self.call_id)

    @property
    def counted(self) -> bool:
        return any(failure.cls in COUNTED for failure in self.failures)

    @property
    def stratum(self) -> str:
        if self.failures:
            return "recorded"
        if ERROR_WORDS.search(self.output[:ERROR_WINDOW]):
            return "unrecorded-error-words"
        return "unrecorded"


def session_kind(path: Path) -> str:
    """`codex` when the file opens as a Codex rollout (either format), else `claude-code`."""
    with path.open("rb") as file:
        for raw in file:
            if not raw.strip():
                continue
            try:
                first = json.loads(raw)
            except ValueError:
                return "claude-code"
            if not isinstance(first, dict):
                return "claude-code"
            if first.get("type") == "session_meta" or (
                "id" in first and "timestamp" in first and "type" not in first
            ):
                return "codex"
            return "claude-code"
    return "claude-code"


def read_calls(sessions: Path) -> list[Call]:
    """Every tool result of every session file under `sessions`, with skilld's record of it."""
    calls: list[Call] = []
    for path in sorted(sessions.rglob("*.jsonl")):
        calls.extend(session_calls(sessions, path))
    return calls


def session_calls(root: Path, path: Path) -> list[Call]:
    defaults = EvolveConfig()
    source = build_source(
        session_kind(path),
        path,
        include_subagents=True,
        tool_result_max_chars=defaults.tool_result_max_chars,
        max_line_bytes=defaults.max_line_bytes,
    )
    relative = path.relative_to(root).as_posix()
    lines = result_lines(path)
    calls: list[Call] = []
    for read in source.scan({}).reads:
        extraction = extract(read.messages, 0, cwd=read.cwd)
        failed: dict[int, Failure] = {failure.seq: failure for failure in extraction.failures}
        arguments: dict[str, tuple[str, str]] = {}
        by_key: dict[tuple[str, str | None], int] = {}
        for seq, message in enumerate(read.messages):
            for call in message.tool_calls:
                if call.call_id is not None:
                    arguments[call.call_id] = (call.name, call.arguments)
            if message.role != "tool":
                continue
            call_id = message.tool_call_id
            name, args = arguments.get(call_id or "", (message.tool_name or "tool", ""))
            failure = failed.get(seq)
            key = (relative, call_id)
            if call_id is not None and key in by_key:  # a replayed result: one call
                index = by_key[key]
                if failure is not None:
                    calls[index] = calls[index]._replace(failures=(*calls[index].failures, failure))
                continue
            by_key[key] = len(calls)
            calls.append(
                Call(
                    relative,
                    lines.get(call_id or ""),
                    call_id,
                    message.tool_name or name,
                    args,
                    message.text,
                    (failure,) if failure is not None else (),
                )
            )
    return calls


def result_lines(path: Path) -> dict[str, int]:
    """The line of each call id's first result in the file (Claude Code `tool_result` blocks,
    Codex `*_output` items)."""
    found: dict[str, int] = {}
    with path.open("rb") as file:
        for number, raw in enumerate(file, 1):
            if b"tool_use_id" not in raw and b"call_id" not in raw:
                continue
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            for call_id in _result_ids(record):
                found.setdefault(call_id, number)
    return found


def _result_ids(record: Any) -> Iterable[str]:
    if not isinstance(record, dict):
        return
    payload = record.get("payload", record)
    if (
        isinstance(payload, dict)
        and str(payload.get("type", "")).endswith("_output")
        and isinstance(payload.get("call_id"), str)
    ):
        yield payload["call_id"]
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):
        for block in content:
            if (
                isinstance(block, dict)
                and block.get("type") == "tool_result"
                and isinstance(block.get("tool_use_id"), str)
            ):
                yield block["tool_use_id"]


# --- drawing a sample -------------------------------------------------------------------


def draw(calls: Sequence[Call], seed: int, recorded: int, unrecorded: int) -> list[Call]:
    """A random sample (fixed seed) of recorded calls, one of unrecorded calls without error
    words, and every unrecorded call with error words."""
    strata: dict[str, list[Call]] = defaultdict(list)
    for call in calls:
        strata[call.stratum].append(call)
    rng = random.Random(seed)
    sample = rng.sample(strata["recorded"], min(recorded, len(strata["recorded"])))
    sample += strata["unrecorded-error-words"]
    sample += rng.sample(strata["unrecorded"], min(unrecorded, len(strata["unrecorded"])))
    return sample


def stratum_sizes(calls: Iterable[Call]) -> dict[str, int]:
    sizes = dict.fromkeys(STRATA, 0)
    for call in calls:
        sizes[call.stratum] += 1
    return sizes


def to_label(call: Call) -> dict[str, Any]:
    """A label row to fill in by hand, with what skilld records today and the output's
    opening for the person labelling."""
    failure = call.failures[0] if call.failures else None
    return {
        "path": call.path,
        "line": call.line,
        "call_id": call.call_id,
        "tool": call.tool,
        "command": command_text(call)[:300],
        "drawn_from": call.stratum,
        "skilld_class": failure.cls if failure else None,
        "skilld_signature": failure.signature if failure else None,
        "output": call.output[:700],
    }


def command_text(call: Call) -> str:
    """The command a call ran, else its arguments."""
    try:
        arguments = json.loads(call.arguments)
    except ValueError:
        return call.arguments
    if isinstance(arguments, dict):
        for key in ("command", "cmd", "file_path", "path", "pattern", "url", "query"):
            value = arguments.get(key)
            if isinstance(value, list):
                return " ".join(str(part) for part in value)
            if isinstance(value, str):
                return value
    return call.arguments


# --- scoring ----------------------------------------------------------------------------


class Ratio(NamedTuple):
    hits: float
    total: float

    def __str__(self) -> str:
        if not self.total:
            return "n/a (0 calls)"
        return f"{self.hits / self.total:.1%} ({self.hits:g} of {self.total:g})"


class Scores(NamedTuple):
    labelled: int
    joined: int
    missing: list[tuple[str, str | None]]
    precision: Ratio
    precision_any: Ratio
    recall: Ratio
    recall_weighted: Ratio
    class_accuracy: Ratio
    meaningful: Ratio
    meaningful_by_hand: Ratio
    recurrences_as_one_row: Ratio
    merges: int
    rejections_counted: Ratio
    replayed: int  # calls (of all read) recorded more than once
    confusion: dict[tuple[str, str], int]
    #: each hand group seen in two sessions or more: (group, sessions, the signatures of its
    #: labelled calls, None for a call skilld does not record)
    recurrences: list[tuple[str, int, list[str | None]]]


def true_failure(label: Mapping[str, Any]) -> bool:
    """A failure that should count for a skill's effect: a real, hook or masked one."""
    return bool(label.get("failure")) and label.get("class") in COUNTED


def score(
    calls: Sequence[Call],
    labels: Sequence[Mapping[str, Any]],
    sizes: Mapping[str, int] | None = None,
) -> Scores:
    """The figures of `calls` (skilld's records) against `labels`; `sizes`: how many calls
    each stratum held when the sample was drawn (for the weighted recall)."""
    by_key = {call.key: call for call in calls}
    joined: list[tuple[Mapping[str, Any], Call]] = []
    missing: list[tuple[str, str | None]] = []
    for label in labels:
        call = by_key.get((label["path"], label.get("call_id")))
        if call is None:
            missing.append((label["path"], label.get("call_id")))
        else:
            joined.append((label, call))

    counted = [(label, call) for label, call in joined if call.counted]
    precision = Ratio(sum(true_failure(label) for label, _ in counted), len(counted))
    precision_any = Ratio(sum(bool(label.get("failure")) for label, _ in counted), len(counted))
    true = [(label, call) for label, call in joined if true_failure(label)]
    recall = Ratio(sum(call.counted for _, call in true), len(true))
    recall_weighted = _weighted_recall(joined, sizes or {})

    recorded_failures = [
        (label, call) for label, call in joined if label.get("failure") and call.failures
    ]
    confusion: dict[tuple[str, str], int] = defaultdict(int)
    for label, call in recorded_failures:
        confusion[(str(label.get("class")), call.failures[0].cls)] += 1
    class_accuracy = Ratio(
        sum(label.get("class") == call.failures[0].cls for label, call in recorded_failures),
        len(recorded_failures),
    )
    judged = [(label, call) for label, call in true if call.failures and label.get("error_key")]
    meaningful = Ratio(
        sum(_meaningful(call.failures[0].signature, label) for label, call in judged), len(judged)
    )
    by_hand = [label for label, call in true if call.failures and "meaningful" in label]
    meaningful_by_hand = Ratio(sum(bool(label["meaningful"]) for label in by_hand), len(by_hand))

    as_one, merges, recurrences = _grouping(joined)
    rejections = [
        (label, call) for label, call in joined if label.get("rejection_user_words")
    ]  # fmt: skip
    rejections_counted = Ratio(
        sum(any(f.cls == "real" for f in call.failures) for _, call in rejections),
        len(rejections),
    )
    return Scores(
        len(labels),
        len(joined),
        missing,
        precision,
        precision_any,
        recall,
        recall_weighted,
        class_accuracy,
        meaningful,
        meaningful_by_hand,
        as_one,
        merges,
        rejections_counted,
        sum(len(call.failures) > 1 for call in calls),
        dict(confusion),
        recurrences,
    )


def _meaningful(signature: str, label: Mapping[str, Any]) -> bool:
    """The signature (`tool | command head | error`) names the command head labelled for it,
    as its head or the head's first words, and holds the error's key phrase in its error."""
    parts = signature.lower().split(" | ", 2)
    head_part, error_part = (parts[1], parts[2]) if len(parts) == 3 else ("", signature.lower())
    head = str(label.get("expected_head") or "").lower()
    key = str(label.get("error_key") or "").lower()
    return (head_part == head or head_part.startswith(f"{head} ")) and key in error_part


def _weighted_recall(
    joined: Sequence[tuple[Mapping[str, Any], Call]], sizes: Mapping[str, int]
) -> Ratio:
    """Recall with each labelled call standing for its stratum's share of all calls: the
    unrecorded calls without error words are sampled, the others labelled in full."""
    labelled: dict[str, int] = defaultdict(int)
    for label, _ in joined:
        labelled[str(label.get("drawn_from"))] += 1
    hits = total = 0.0
    for label, call in joined:
        if not true_failure(label):
            continue
        stratum = str(label.get("drawn_from"))
        weight = sizes.get(stratum, labelled[stratum]) / max(labelled[stratum], 1)
        total += weight
        hits += weight if call.counted else 0.0
    return Ratio(round(hits, 1), round(total, 1))


def _grouping(
    joined: Sequence[tuple[Mapping[str, Any], Call]],
) -> tuple[Ratio, int, list[tuple[str, int, list[str | None]]]]:
    """(hand groups seen in two sessions or more that are one signature, i.e. one `failures`
    row holding all their sessions; signatures holding calls of distinct groups, counted as
    the groups merged into another)."""
    groups: dict[str, list[Call]] = defaultdict(list)
    for label, call in joined:
        if label.get("failure") and label.get("group"):
            groups[str(label["group"])].append(call)
    recurring = {
        group: members for group, members in groups.items() if len({c.path for c in members}) >= 2
    }
    as_one = sum(
        all(call.failures for call in members)
        and len({call.failures[0].signature for call in members}) == 1
        for members in recurring.values()
    )
    by_signature: dict[str, set[str]] = defaultdict(set)
    for group, members in groups.items():
        for call in members:
            if call.failures:
                by_signature[call.failures[0].signature].add(group)
    merges = sum(len(found) - 1 for found in by_signature.values() if len(found) > 1)
    detail = [
        (
            group,
            len({call.path for call in members}),
            [call.failures[0].signature if call.failures else None for call in members],
        )
        for group, members in sorted(recurring.items())
    ]
    return Ratio(as_one, len(recurring)), merges, detail


def print_table(scores: Scores, out: Any = sys.stdout, *, detail: bool = False) -> None:
    rows = [
        ("labelled calls (joined)", f"{scores.labelled} ({scores.joined})"),
        ("precision: counted -> true failure", str(scores.precision)),
        ("  counted -> any failure (test, benign..)", str(scores.precision_any)),
        ("recall: true failure -> counted", str(scores.recall)),
        ("  weighted by the sample's strata", str(scores.recall_weighted)),
        ("class accuracy (recorded failures)", str(scores.class_accuracy)),
        ("meaningful signatures (head + key)", str(scores.meaningful)),
        ("  as judged by hand when labelled", str(scores.meaningful_by_hand)),
        ("recurrences shown as one row", str(scores.recurrences_as_one_row)),
        ("distinct groups merged into a row", str(scores.merges)),
        ("rejections with user words -> real", str(scores.rejections_counted)),
        ("calls recorded twice (a replayed id)", str(scores.replayed)),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"{'figure':<{width}}  value", file=out)
    print(f"{'-' * width}  {'-' * 24}", file=out)
    for name, value in rows:
        print(f"{name:<{width}}  {value}", file=out)
    if scores.confusion:
        print("\nclass (labelled -> skilld), recorded failures:", file=out)
        for (labelled, recorded), count in sorted(scores.confusion.items()):
            mark = "" if labelled == recorded else "  <-"
            print(f"  {labelled:>9} -> {recorded:<9} {count:>4}{mark}", file=out)
    if detail:
        print("\nrecurrences (hand groups in two sessions or more):", file=out)
        for group, sessions, signatures in scores.recurrences:
            one = len(set(signatures)) == 1 and None not in signatures
            print(f"  {'one row ' if one else 'split   '} {group} ({sessions} sessions)", file=out)
            for signature in sorted(set(signatures), key=str):
                print(f"      {signatures.count(signature)} x {signature}", file=out)
    if scores.missing:
        print(f"\n{len(scores.missing)} labels match no call, e.g. {scores.missing[0]}", file=out)


def misses(calls: Sequence[Call], labels: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each labelled call skilld reads otherwise than its label, one line apiece: what to look
    at next when a figure falls short."""
    by_key = {call.key: call for call in calls}
    lines: list[str] = []
    for label in labels:
        call = by_key.get((label["path"], label.get("call_id")))
        if call is None:
            continue
        recorded = call.failures[0] if call.failures else None
        wanted = str(label.get("class")) if label.get("failure") else "none"
        got = recorded.cls if recorded is not None else "none"
        wrong = []
        if call.counted != true_failure(label):
            wrong.append("counted" if call.counted else "missed")
        elif label.get("failure") and recorded is not None and wanted != got:
            wrong.append("class")
        if (
            true_failure(label)
            and recorded is not None
            and label.get("error_key")
            and not _meaningful(recorded.signature, label)
        ):
            wrong.append("signature")
        if not wrong:
            continue
        where = f"{label['path']}:{label.get('line')} {label.get('call_id')}"
        lines.append(
            f"{','.join(wrong):<17} {wanted:>8} -> {got:<8} {where}\n"
            f"    head {label.get('expected_head')!r} key {label.get('error_key')!r}\n"
            f"    {recorded.signature if recorded is not None else '-'}\n"
            f"    $ {command_text(call)[:160]!r}\n"
            f"    > {call.output[:300]!r}"
        )
    return lines


def read_labels(path: Path) -> list[dict[str, Any]]:
    labels = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            label = json.loads(line)
        except ValueError as error:
            raise SystemExit(f"{path}:{number}: not JSON ({error})") from None
        if not isinstance(label, dict) or "path" not in label or "failure" not in label:
            raise SystemExit(f"{path}:{number}: a label needs `path`, `call_id` and `failure`")
        labels.append(label)
    return labels


# --- a tiny corpus for --smoke ----------------------------------------------------------


def write_smoke_corpus(root: Path) -> Path:
    """Two Claude Code sessions where `git push` fails alike, a hook refusal, a rejection with
    the user's words, a read that succeeds; and their labels."""

    def session(name: str, results: list[tuple[str, str, str, bool]]) -> None:
        lines = []
        for call_id, command, output, is_error in results:
            lines.append(
                {
                    "type": "assistant",
                    "sessionId": name,
                    "version": "2.1.0",
                    "timestamp": "2026-01-01T00:00:00Z",
                    "message": {
                        "role": "assistant",
                        "content": [
                            {
                                "type": "tool_use",
                                "id": call_id,
                                "name": "Bash",
                                "input": {"command": command},
                            }
                        ],
                    },
                }
            )
            lines.append({
                "type": "user", "sessionId": name, "version": "2.1.0",
                "timestamp": "2026-01-01T00:00:01Z",
                "message": {"role": "user", "content": [{
                    "type": "tool_result", "tool_use_id": call_id, "content": output,
                    "is_error": is_error}]},
            })  # fmt: skip
        folder = root / "sessions" / "project"
        folder.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(line) + "\n" for line in lines)
        (folder / f"{name}.jsonl").write_text(text, encoding="utf-8")

    push = "Exit code 1\nfatal: The current branch main has no upstream branch."
    session("s1", [("t1", "git push", push, True), ("t2", "ls", "a.txt", False)])
    session("s2", [("t3", "git push", push, True), ("t4", "cat a.txt", "hello", False)])
    labels = [
        {"path": "project/s1.jsonl", "call_id": "t1", "failure": True, "class": "real",
         "expected_head": "git push", "error_key": "no upstream", "group": "push-upstream",
         "drawn_from": "recorded"},
        {"path": "project/s2.jsonl", "call_id": "t3", "failure": True, "class": "real",
         "expected_head": "git push", "error_key": "no upstream", "group": "push-upstream",
         "drawn_from": "recorded"},
        {"path": "project/s1.jsonl", "call_id": "t2", "failure": False, "drawn_from": "unrecorded"},
        {"path": "project/s2.jsonl", "call_id": "t4", "failure": False, "drawn_from": "unrecorded"},
    ]  # fmt: skip
    labels_path = root / "labels.jsonl"
    labels_path.write_text("".join(json.dumps(label) + "\n" for label in labels), "utf-8")
    return labels_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=Path, metavar="DIR", help="the session files")
    parser.add_argument("--labels", type=Path, metavar="FILE", help="labels.jsonl")
    parser.add_argument("--sample", type=Path, metavar="FILE", help="the strata's sizes (JSON)")
    parser.add_argument("--draw", type=Path, metavar="OUT", help="write a sample to label")
    parser.add_argument("--seed", type=int, default=40)
    parser.add_argument("--recorded", type=int, default=200, help="recorded calls to draw")
    parser.add_argument("--unrecorded", type=int, default=120, help="other calls to draw")
    parser.add_argument("--detail", action="store_true", help="list the recurrences too")
    parser.add_argument("--misses", action="store_true", help="list the calls read wrong")
    parser.add_argument("--smoke", action="store_true", help="a tiny corpus written in tmp")
    args = parser.parse_args()

    if args.smoke:
        with tempfile.TemporaryDirectory() as scratch:
            labels_path = write_smoke_corpus(Path(scratch))
            scores = score(read_calls(Path(scratch) / "sessions"), read_labels(labels_path))
            print_table(scores)
            expected = (scores.precision.hits, scores.recall.hits, scores.recurrences_as_one_row)
            if expected != (2, 2, Ratio(1, 1)) or scores.missing:
                raise SystemExit(f"smoke corpus scored wrong: {scores}")
        return
    if args.sessions is None or not args.sessions.is_dir():
        parser.error("--sessions DIR: a folder of session files is needed")
    calls = read_calls(args.sessions)
    sizes = stratum_sizes(calls)
    if args.draw is not None:
        sample = draw(calls, args.seed, args.recorded, args.unrecorded)
        args.draw.write_text("".join(json.dumps(to_label(c)) + "\n" for c in sample), "utf-8")
        print(json.dumps({"seed": args.seed, "calls": len(calls), "strata": sizes}))
        print(f"{len(sample)} calls to label written to {args.draw}")
        return
    if args.labels is None:
        parser.error("--labels FILE (or --draw OUT) is needed")
    drawn = json.loads(args.sample.read_text()).get("strata") if args.sample else None
    print(f"{len(calls)} tool calls in {len({c.path for c in calls})} session files; "
          f"strata now: {sizes}")  # fmt: skip
    labels = read_labels(args.labels)
    print_table(score(calls, labels, drawn), detail=args.detail)
    if args.misses:
        print("\ncalls read otherwise than labelled:")
        print("\n".join(misses(calls, labels)))


if __name__ == "__main__":
    main()
