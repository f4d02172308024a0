"""`bench/corpus/fetch.py` rebuilds the session corpus from its manifest and checks every file.

The repository here is a real git repository in a temp dir, read as a local mirror
(`--mirror DIR`, `DIR/<owner>+<name>/repo`), so the test needs no network.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

FETCH = Path(__file__).resolve().parent.parent / "bench" / "corpus" / "fetch.py"
SESSION = b'{"type":"user","message":{"role":"user","content":"hi"}}\n'
RECORDS = [{"type": "user", "message": {"role": "user", "content": "h\u00e9"}}]


def git(*arguments: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *arguments], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def mirrored_repository(tmp_path: Path) -> tuple[Path, str]:
    work = tmp_path / "work"
    (work / "logs").mkdir(parents=True)
    (work / "s.jsonl").write_bytes(SESSION)
    (work / "logs" / "chat.json").write_text(json.dumps(RECORDS, indent=2), encoding="utf-8")
    git("init", "-q", cwd=work)
    git("add", ".", cwd=work)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "s", cwd=work)
    commit = git("rev-parse", "HEAD", cwd=work)
    mirror = tmp_path / "mirror"
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(work), str(mirror / "acme+logs" / "repo")],
        check=True,
    )
    return mirror, commit


def manifest(tmp_path: Path, commit: str, session_sha: str) -> Path:
    as_jsonl = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in RECORDS).encode()
    entries = [
        {"repository": "acme/logs", "commit": commit, "path": "s.jsonl", "format": "jsonl",
         "local": "acme+logs/s.jsonl", "sha256": session_sha},
        {"repository": "acme/logs", "commit": commit, "path": "logs/chat.json",
         "format": "json-array", "local": f"acme+logs/logs/chat.json@{commit[:12]}.jsonl",
         "sha256": hashlib.sha256(as_jsonl).hexdigest()},
    ]  # fmt: skip
    path = tmp_path / "sources.json"
    path.write_text(json.dumps(entries), encoding="utf-8")
    return path


def fetch(sources: Path, out: Path, mirror: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(FETCH), "--out", str(out), "--manifest", str(sources),
         "--mirror", str(mirror)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_the_corpus_is_rebuilt_at_the_commits_the_manifest_names(tmp_path: Path) -> None:
    mirror, commit = mirrored_repository(tmp_path)
    sources = manifest(tmp_path, commit, hashlib.sha256(SESSION).hexdigest())

    run = fetch(sources, tmp_path / "corpus", mirror)

    assert run.returncode == 0, run.stderr
    assert "2 of 2 session files written" in run.stdout
    assert (tmp_path / "corpus/acme+logs/s.jsonl").read_bytes() == SESSION
    chat = tmp_path / f"corpus/acme+logs/logs/chat.json@{commit[:12]}.jsonl"
    assert [json.loads(line) for line in chat.read_text("utf-8").splitlines()] == RECORDS


def test_a_file_that_differs_from_the_manifest_is_reported_and_not_written(
    tmp_path: Path,
) -> None:
    mirror, commit = mirrored_repository(tmp_path)
    sources = manifest(tmp_path, commit, "0" * 64)

    run = fetch(sources, tmp_path / "corpus", mirror)

    assert run.returncode == 1
    assert "acme+logs/s.jsonl: differs from the manifest's SHA-256" in run.stderr
    assert not (tmp_path / "corpus/acme+logs/s.jsonl").exists()
    assert "1 of 2 session files written" in run.stdout
