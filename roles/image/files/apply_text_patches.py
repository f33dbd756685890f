#!/usr/bin/env python3
"""Apply text patches to the installed vllm package at image build time (run by the image role's Dockerfile).

    apply_text_patches.py PACKAGE_DIR PATCHES_JSON

PATCHES_JSON is a list of {"path": "relative/to/the/package.py", "search": "...", "replace": "...", "count": 1}.
Each `search` must occur exactly `count` times (default 1) in the file as it is at that point (earlier patches of
the same file already applied), else nothing is written and the exit status is 1, so the image build fails: a
guard that no longer matches the vLLM release is an error, not a silent no-op.

Runs with the image's own Python (3.8 or newer), standard library only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


class PatchError(Exception):
    """A patch that cannot be applied as written."""


def _target(package_dir: Path, rel: str) -> Path:
    path = Path(rel)
    if not rel or path.is_absolute() or ".." in path.parts:
        raise PatchError(f"path {rel!r}: must be relative to the vllm package, without '..'")
    return package_dir / path


def apply_patches(package_dir: Path, patches: list[dict]) -> list[str]:
    """Apply every patch in order, all or nothing; return one line per patch applied."""
    texts: dict[Path, str] = {}
    done: list[str] = []
    for number, patch in enumerate(patches, start=1):
        rel = str(patch.get("path", ""))
        search = patch.get("search")
        replace = patch.get("replace")
        count = patch.get("count", 1)
        where = f"patch {number} ({rel})"
        if not isinstance(search, str) or not search:
            raise PatchError(f"{where}: 'search' must be a non-empty string")
        if not isinstance(replace, str):
            raise PatchError(f"{where}: 'replace' must be a string")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise PatchError(f"{where}: 'count' must be a positive integer, got {count!r}")
        target = _target(package_dir, rel)
        if target not in texts:
            if not target.is_file():
                raise PatchError(f"{where}: {target} does not exist in the installed package")
            texts[target] = target.read_text(encoding="utf-8")
        found = texts[target].count(search)
        if found != count:
            raise PatchError(
                f"{where}: the search text occurs {found} times, expected {count}; the patch does not fit this "
                f"vLLM release. Search text (JSON, first 200 characters): {json.dumps(search[:200])}"
            )
        texts[target] = texts[target].replace(search, replace)
        done.append(f"{where}: replaced {count} occurrence(s)")
    for target, text in texts.items():
        target.write_text(text, encoding="utf-8")
    return done


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    package_dir, patches_file = Path(argv[1]), Path(argv[2])
    patches = json.loads(patches_file.read_text(encoding="utf-8"))
    if not isinstance(patches, list):
        print(f"text patches: {patches_file} must hold a list", file=sys.stderr)
        return 1
    try:
        for line in apply_patches(package_dir, patches):
            print(f"text patches: {line}")
    except PatchError as exc:
        print(f"text patches: FAILED: {exc} (end)", file=sys.stderr)  # (end): the image role quotes up to here
        return 1
    print(f"text patches: {len(patches)} applied to {package_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
