"""Rebuild the labelled corpus of real sessions from its manifest (bench/corpus/sources.json).

    python bench/corpus/fetch.py --out /work/corpus
    python bench/corpus/fetch.py --out /work/corpus --mirror /work/.mirror   # local bare repos

Each entry names a public GitHub repository, a commit and a path. The repository is fetched
at that commit into a bare cache under `<out>/.git/` (`git fetch --depth 1 origin <commit>`:
GitHub serves a commit by its hash), the file is read with `git show`, and written to
`<out>/<local>`. A `json-array` entry (the `logs/chat.json` a Stop hook writes: one JSON array
of Claude Code's records) is written as JSONL, one record a line, as Claude Code writes them.
Every file is checked against the manifest's SHA-256; the exit status is 1 when any file
could not be fetched or differs. The transcripts are other projects' data: they stay out of
this repository.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

MANIFEST = Path(__file__).resolve().parent / "sources.json"


def git(git_dir: Path, *arguments: str) -> bytes:
    run = subprocess.run(
        ["git", f"--git-dir={git_dir}", *arguments], capture_output=True, check=False
    )
    if run.returncode != 0:
        raise RuntimeError(run.stderr.decode(errors="replace").strip() or f"git {arguments[0]}")
    return run.stdout


def repository_dir(repository: str, out: Path, mirror: Path | None) -> Path:
    """A bare git directory holding `repository`: the local mirror's, else a cache in `out`."""
    if mirror is not None:
        local = mirror / repository.replace("/", "+") / "repo"
        if local.is_dir():
            return local
    cache = out / ".git" / f"{repository.replace('/', '+')}.git"
    if not cache.is_dir():
        cache.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "--quiet", "--bare", str(cache)], check=True)
        git(cache, "remote", "add", "origin", f"https://github.com/{repository}.git")
    return cache


def file_at(git_dir: Path, commit: str, path: str) -> bytes:
    try:
        return git(git_dir, "show", f"{commit}:{path}")
    except RuntimeError:
        if git_dir.name.endswith(".git"):  # a cache of ours: fetch the commit, once
            git(git_dir, "fetch", "--quiet", "--depth", "1", "origin", commit)
            return git(git_dir, "show", f"{commit}:{path}")
        raise


def as_written(entry: dict[str, Any], data: bytes) -> bytes:
    """The session file as the corpus holds it."""
    if entry.get("format") != "json-array":
        return data
    records = json.loads(data)
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records).encode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the corpus folder to write")
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument(
        "--mirror", type=Path, help="a folder of bare repositories, <owner>+<name>/repo"
    )
    args = parser.parse_args()
    entries = json.loads(args.manifest.read_text(encoding="utf-8"))
    problems = 0
    for entry in entries:
        target = args.out / entry["local"]
        try:
            git_dir = repository_dir(entry["repository"], args.out, args.mirror)
            data = as_written(entry, file_at(git_dir, entry["commit"], entry["path"]))
        except (RuntimeError, ValueError, subprocess.CalledProcessError) as error:
            print(f"{entry['repository']}@{entry['commit'][:12]}:{entry['path']}: {error}",
                  file=sys.stderr)  # fmt: skip
            problems += 1
            continue
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            print(f"{entry['local']}: differs from the manifest's SHA-256", file=sys.stderr)
            problems += 1
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    print(f"{len(entries) - problems} of {len(entries)} session files written to {args.out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
