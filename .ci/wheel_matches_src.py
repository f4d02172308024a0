"""Fail unless the built wheel carries every file of the package in `src/`.

A user installs with `pip install .`, which builds this wheel; a file that setuptools'
package-data globs miss (a new static asset, a template in a new folder) works under the
editable install the suite uses and is missing for everyone else.
"""

import sys
import zipfile
from pathlib import Path

SKIPPED_SUFFIXES = {".pyc"}


def package_files(src: Path) -> set[str]:
    return {
        path.relative_to(src).as_posix()
        for path in (src / "skilld").rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and path.suffix not in SKIPPED_SUFFIXES
    }


def wheel_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {name for name in archive.namelist() if name.startswith("skilld/")}


def main(wheel: str, src: str = "src") -> int:
    missing = package_files(Path(src)) - wheel_files(Path(wheel))
    for name in sorted(missing):
        print(f"wheel lacks {name}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
