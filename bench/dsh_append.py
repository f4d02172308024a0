"""Cost of picking up one appended frame: a ~50 MB DSH session versus a one-frame session.

The `dsh` source promises that a tick costs what was appended, not what the file holds: with
the cursor at the end, a scan that finds one new frame must take about as long on a session
of 50 MB (uncompressed) as on a session of one frame. Target: ratio <= 1.5.

Run: python bench/dsh_append.py [--json] [--smoke]

`--smoke` builds a 1 MB session and times three appends: it checks that every step still runs,
and exits 0 whatever the ratio (at that size the ratio is noise).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import zstandard

from skilld.transcripts.dsh import DshSource

TARGET_UNCOMPRESSED_BYTES = 50 * 1024 * 1024
REPETITIONS = 30
TARGET_RATIO = 1.5
VOCABULARY = (
    "the build failed because cache key path config module test import error retry "
    "deploy service schema parse token window session frame offset cursor skill agent"
)


class SessionWriter:
    """Appends DSH-shaped batches (one checksummed zstd frame each) to one session file."""

    def __init__(self, root: Path, session_id: str, rng: random.Random) -> None:
        self.rng = rng
        self.words = VOCABULARY.split()
        self.seq = 0
        self.uncompressed = 0
        self.compressor = zstandard.ZstdCompressor(write_checksum=True)
        directory = root / "--bench--" / session_id
        directory.mkdir(parents=True)
        self.path = directory / "session.jsonl.zstd"
        header = {"type": "session", "version": 0, "id": session_id, "createdAt": 0, "cwd": "/b"}
        self.path.write_bytes(self._frame([header]))

    def _frame(self, records: list[dict[str, Any]]) -> bytes:
        data = "".join(json.dumps(record) + "\n" for record in records).encode()
        self.uncompressed += len(data)
        return self.compressor.compress(data)

    def _event(self, event_type: str, data: dict[str, Any], **extra: Any) -> dict[str, Any]:
        record = {"type": event_type, "seq": self.seq, "time": 1_786_000_000_000 + self.seq}
        self.seq += 1
        return {**record, "data": data, **extra}

    def _text(self, words: int) -> str:
        return " ".join(self.rng.choice(self.words) for _ in range(words))

    def turn(self) -> list[dict[str, Any]]:
        """One realistic turn: a question, a tool round trip with streamed chunks, an answer."""
        call_id = f"call-{self.seq}"
        user = {"role": "user", "content": [{"type": "text", "text": self._text(40)}]}
        call = {
            "type": "tool-call",
            "id": call_id,
            "name": "bash",
            "arguments": '{"command":"make"}',
        }
        result = {
            "type": "tool-result",
            "toolCallId": call_id,
            "content": [{"type": "text", "text": self._text(700)}],
            "isError": False,
        }
        answer = [
            {"type": "reasoning", "text": self._text(80)},
            {"type": "text", "text": self._text(120)},
        ]
        return [
            self._event("turn/start", {"turn": 1}),
            self._event("user/message", {**user, "source": {"kind": "user"}}, surfaceOp="append"),
            {"type": "text-chunks", "seq0": self.seq, "time0": 0, "texts": self._text(60).split()},
            self._event("assistant/message", {"message": {"content": [call]}}, surfaceOp="append"),
            self._event("tool/call", {"callId": call_id, "name": "bash", "arguments": "{}"}),
            self._event("tool/result", {"message": {"content": [result]}}, surfaceOp="append"),
            self._event("assistant/message", {"message": {"content": answer}}, surfaceOp="append"),
            self._event("turn/end", {"turn": 1, "reason": {"kind": "completed"}}),
        ]

    def append_frame(self) -> None:
        frame = self._frame(self.turn())
        with open(self.path, "ab") as file:
            file.write(frame)

    def fill(self, uncompressed_bytes: int) -> None:
        with open(self.path, "ab") as file:
            while self.uncompressed < uncompressed_bytes:
                file.write(self._frame(self.turn()))


def timed_appends(
    writer: SessionWriter, source: DshSource, cursors: dict[str, Any], repetitions: int
) -> Iterator[float]:
    for _ in range(repetitions):
        writer.append_frame()
        started = time.perf_counter()
        result = source.scan(cursors)
        elapsed = time.perf_counter() - started
        (read,) = result.reads
        assert len(read.messages) >= 4, "the appended frame was not picked up"
        cursors[read.session] = read.cursor
        yield elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true", help="also one JSON line for bench/tick.py")
    parser.add_argument("--smoke", action="store_true", help="a 1 MB session, three appends")
    args = parser.parse_args()
    as_json = args.json
    target_bytes = 1024 * 1024 if args.smoke else TARGET_UNCOMPRESSED_BYTES
    repetitions = 3 if args.smoke else REPETITIONS
    rng = random.Random(7)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as scratch:
        big_root, small_root = Path(scratch, "big"), Path(scratch, "small")
        big = SessionWriter(big_root, "session-big", rng)
        started = time.perf_counter()
        big.fill(target_bytes)
        built = time.perf_counter() - started
        small = SessionWriter(small_root, "session-small", rng)
        small.append_frame()

        big_source, small_source = DshSource(big_root), DshSource(small_root)
        started = time.perf_counter()
        first = big_source.scan({})
        full_read = time.perf_counter() - started
        big_cursors = {read.session: read.cursor for read in first.reads}
        small_cursors = {read.session: read.cursor for read in small_source.scan({}).reads}

        big_times = sorted(timed_appends(big, big_source, big_cursors, repetitions))
        small_times = sorted(timed_appends(small, small_source, small_cursors, repetitions))

        big_median = statistics.median(big_times)
        small_median = statistics.median(small_times)
        ratio = big_median / small_median
        size_mb = big.path.stat().st_size / 1e6
        print(
            f"big session: {big.uncompressed / 1e6:.1f} MB uncompressed, {size_mb:.1f} MB on disk"
        )
        print(f"  built in {built:.1f} s; first full read {full_read:.2f} s")
        print(f"scan picking up one appended frame, median of {repetitions}:")
        big_label = f"~{target_bytes / 1024 / 1024:.0f} MB session"
        print(f"  {big_label:<15}: {big_median * 1e3:.3f} ms (min {big_times[0] * 1e3:.3f})")
        print(f"  one-frame      : {small_median * 1e3:.3f} ms (min {small_times[0] * 1e3:.3f})")
        verdict = "OK" if ratio <= TARGET_RATIO else "OVER TARGET"
        print(f"  ratio          : {ratio:.2f}x (target <= {TARGET_RATIO}x) {verdict}")
        if as_json:
            label = f"dsh: 1 frame appended, {big.uncompressed / 1e6:.0f} MB session"
            summary = {"label": label, "with_history": big_median, "baseline": small_median}
            print(json.dumps(summary))
        return 0 if args.smoke or ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
