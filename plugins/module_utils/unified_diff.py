#!/usr/bin/env python3
"""Unified diffs against the installed ``vllm`` package: parsed, checked hunk by hunk, then applied all or nothing.

The image role copies this file into the build context of the patched sm80 image and runs it there with the base
image's own Python (3.8 or newer, standard library only):

    unified_diff.py apply PACKAGE_DIR MANIFEST_JSON

``MANIFEST_JSON`` is ``{"base_digest": "sha256:...", "patches": [{"name": "0001-x.patch",
"file": "patches/0001-x.patch", "sha256": "..."}]}`` (``file`` relative to the manifest's directory). On the
controller the image role's filters import it to check the patch files before anything changes (``parse`` and
``patch_summary``).

The rules are stricter than ``patch`` or ``git apply`` defaults, on purpose: the patch set was reviewed against
one vLLM release, and a change that lands somewhere else than reviewed is worse than a failed build.

* Paths are git's (``a/vllm/...``, ``b/vllm/...``) or plain ``vllm/...``; they must lie inside the ``vllm/`` tree.
* A hunk applies only where its context and removed lines match exactly; the place may move (line offset, as
  ``patch`` and ``git apply`` allow), the text may not (no fuzz).
* Every hunk of every patch is tried, in order, against the files as the patches before it left them; when any
  hunk fails, every failure is reported (patch file, target file, hunk number and header, why, the base image
  digest) and nothing is written. A hunk whose result is already there is named as such: the base has the change.
* Renames, copies and binary diffs are refused (make the diff with ``git diff --no-renames``; the sparse backend
  work has no binary files). Mode-only changes are ignored.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
PACKAGE = "vllm"
# git extended header lines that carry nothing for a text patch of .py files.
_IGNORED_GIT_HEADERS = ("index ", "old mode ", "new mode ", "similarity index ", "dissimilarity index ")
_REFUSED_GIT_HEADERS = {
    "rename from ": "a rename (make the diff with git diff --no-renames)",
    "rename to ": "a rename (make the diff with git diff --no-renames)",
    "copy from ": "a copy (make the diff with git diff --no-renames)",
    "copy to ": "a copy (make the diff with git diff --no-renames)",
    "GIT binary patch": "a binary diff (the patch set must be text)",
    "Binary files ": "a binary diff (the patch set must be text)",
}


class PatchFormatError(Exception):
    """A patch file that is not a unified diff of files inside the vllm package."""


@dataclass
class Hunk:
    number: int  # 1-based within its file
    header: str  # the @@ line as written
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: list[tuple[str, str]] = field(default_factory=list)  # (" " | "-" | "+", text with its line ending)

    @property
    def old(self) -> list[str]:
        return [text for tag, text in self.lines if tag in " -"]

    @property
    def new(self) -> list[str]:
        return [text for tag, text in self.lines if tag in " +"]


@dataclass
class FilePatch:
    path: str  # relative to the package directory (vllm/ stripped)
    created: bool = False
    deleted: bool = False
    hunks: list[Hunk] = field(default_factory=list)


@dataclass
class HunkFailure:
    patch: str
    path: str
    hunk: int | None
    header: str
    reason: str

    def line(self, base_digest: str) -> str:
        where = f"{self.patch}: {PACKAGE}/{self.path}"
        if self.hunk is not None:
            where += f" hunk {self.hunk} ({self.header})"
        return f"{where}: {self.reason}; base image {base_digest or 'unknown'}"


def _package_path(raw: str, patch: str, lineno: int) -> str:
    """``a/vllm/x.py`` / ``b/vllm/x.py`` / ``vllm/x.py`` -> ``x.py``; anything outside vllm/ is an error."""
    text = raw.split("\t", 1)[0].strip()
    if text.startswith('"'):
        raise PatchFormatError(f"{patch} line {lineno}: quoted path {text} (a non-ASCII name is not supported)")
    parts = PurePosixPath(text).parts
    if len(parts) > 1 and parts[0] in ("a", "b") and parts[1] == PACKAGE:
        parts = parts[1:]
    if PurePosixPath(text).is_absolute() or ".." in parts or len(parts) < 2 or parts[0] != PACKAGE:
        raise PatchFormatError(
            f"{patch} line {lineno}: {text} is not a file of the {PACKAGE}/ tree; make the diff from the root of a "
            f"vLLM checkout, limited to the package (git diff --no-renames v0.26.0 HEAD -- {PACKAGE}/)"
        )
    return str(PurePosixPath(*parts[1:]))


def parse(text: str, patch: str) -> list[FilePatch]:
    """The file patches of one unified diff (git's or diff -u's); ``patch`` names it in errors."""
    lines = text.splitlines(keepends=True)
    files: list[FilePatch] = []
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        for prefix, what in _REFUSED_GIT_HEADERS.items():
            if line.startswith(prefix):
                raise PatchFormatError(f"{patch} line {i + 1}: {what}")
        if not line.startswith("--- "):
            i += 1  # commit message, diff --git, index, mode lines: not part of a hunk
            continue
        if i + 1 >= n or not lines[i + 1].startswith("+++ "):
            raise PatchFormatError(f"{patch} line {i + 1}: '---' without a '+++' line after it")
        old_raw, new_raw = line[4:].rstrip("\r\n"), lines[i + 1][4:].rstrip("\r\n")
        created, deleted = old_raw.split("\t")[0] == "/dev/null", new_raw.split("\t")[0] == "/dev/null"
        if created and deleted:
            raise PatchFormatError(f"{patch} line {i + 1}: both sides are /dev/null")
        path = _package_path(old_raw, patch, i + 1) if deleted else _package_path(new_raw, patch, i + 2)
        if not created and not deleted:
            old_path = _package_path(old_raw, patch, i + 1)
            if old_path != path:
                raise PatchFormatError(
                    f"{patch} line {i + 1}: {old_path} becomes {path}, a rename "
                    "(make the diff with git diff --no-renames)"
                )
        fp = FilePatch(path=path, created=created, deleted=deleted)
        i += 2
        while i < n and lines[i].startswith("@@"):
            m = HUNK_HEADER.match(lines[i].rstrip("\r\n"))
            if not m:
                raise PatchFormatError(f"{patch} line {i + 1}: malformed hunk header {lines[i].strip()}")
            hunk = Hunk(
                number=len(fp.hunks) + 1,
                header=lines[i].rstrip("\r\n"),
                old_start=int(m.group(1)),
                old_len=int(m.group(2)) if m.group(2) is not None else 1,
                new_start=int(m.group(3)),
                new_len=int(m.group(4)) if m.group(4) is not None else 1,
            )
            header_line = i + 1
            i += 1
            old_seen = new_seen = 0
            while i < n and (old_seen < hunk.old_len or new_seen < hunk.new_len):
                body = lines[i]
                tag = body[:1]
                if body.startswith("\\"):  # "\ No newline at end of file" of the line before
                    _strip_last_newline(hunk)
                    i += 1
                    continue
                if body in ("\n", "\r\n"):  # an empty context line whose leading space an editor removed
                    tag, body = " ", " " + body
                if tag not in " -+":
                    raise PatchFormatError(
                        f"{patch} hunk at line {header_line}: line {i + 1} starts with {tag!r}; the hunk header "
                        f"promises {hunk.old_len} old and {hunk.new_len} new lines, found {old_seen} and {new_seen} "
                        "(a hand-edited hunk whose header was not updated?)"
                    )
                hunk.lines.append((tag, body[1:]))
                old_seen += tag in " -"
                new_seen += tag in " +"
                i += 1
            if old_seen != hunk.old_len or new_seen != hunk.new_len:
                raise PatchFormatError(
                    f"{patch} hunk at line {header_line}: the header promises {hunk.old_len} old and "
                    f"{hunk.new_len} new lines, the file ends after {old_seen} and {new_seen}"
                )
            if i < n and lines[i].startswith("\\"):
                _strip_last_newline(hunk)
                i += 1
            fp.hunks.append(hunk)
        if not fp.hunks:
            raise PatchFormatError(f"{patch}: {PACKAGE}/{path} has a header but no hunk")
        files.append(fp)
    if not files:
        raise PatchFormatError(f"{patch}: no file changes found (not a unified diff?)")
    return files


def _strip_last_newline(hunk: Hunk) -> None:
    if hunk.lines:
        tag, text = hunk.lines[-1]
        hunk.lines[-1] = (tag, text.rstrip("\r\n"))


def patch_summary(text: str, patch: str) -> dict[str, object]:
    """What a patch file changes, for the preflight's records and the build's log: files, hunks, sha256."""
    files = parse(text, patch)
    return {
        "name": patch,
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "files": [f"{PACKAGE}/{f.path}" for f in files],
        "created": [f"{PACKAGE}/{f.path}" for f in files if f.created],
        "hunks": sum(len(f.hunks) for f in files),
    }


def _find(lines: list[str], needle: list[str], expected: int) -> int | None:
    """Where ``needle`` occurs in ``lines``, nearest to ``expected`` first (the offset patch and git allow)."""
    if not needle:
        return min(max(expected, 0), len(lines))
    last = len(lines) - len(needle)
    for distance in range(0, max(expected, last - expected, 0) + 1):
        for start in (expected - distance, expected + distance) if distance else (expected,):
            if 0 <= start <= last and lines[start : start + len(needle)] == needle:
                return start
    return None


def _why(lines: list[str], hunk: Hunk, expected: int) -> str:
    """The first line of the hunk's old text that differs at the place the header names."""
    for k, want in enumerate(hunk.old):
        have = lines[expected + k] if 0 <= expected + k < len(lines) else None
        if have != want:
            got = "the end of the file" if have is None else json.dumps(have.rstrip("\r\n")[:120])
            return (
                f"its context does not match anywhere in the file; at line {expected + k + 1} it expects "
                f"{json.dumps(want.rstrip(chr(10))[:120])} and the base has {got}"
            )
    return "its context does not match anywhere in the file"


def apply_all(
    package_dir: Path, patches: list[tuple[str, str]]
) -> tuple[dict[str, list[str] | None], list[HunkFailure], list[str]]:
    """Try every hunk of every (name, text) patch in order against the package; nothing is written.

    Returns (the resulting text of each touched file, None when deleted; the failures; one log line per hunk)."""
    state: dict[str, list[str] | None] = {}
    failures: list[HunkFailure] = []
    log: list[str] = []
    for name, text in patches:
        try:
            files = parse(text, name)
        except PatchFormatError as exc:
            failures.append(HunkFailure(name, "", None, "", str(exc)))
            continue
        for fp in files:
            target = package_dir / fp.path
            if fp.path not in state:
                state[fp.path] = (
                    target.read_text(encoding="utf-8").splitlines(keepends=True) if target.is_file() else None
                )
            current = state[fp.path]
            if fp.created:
                if current is not None:
                    failures.append(
                        HunkFailure(name, fp.path, None, "", "the patch creates it and the base already has it")
                    )
                    continue
                current = []
            elif current is None:
                failures.append(
                    HunkFailure(name, fp.path, None, "", "the patch changes it and the base does not have it")
                )
                continue
            offset = 0
            for hunk in fp.hunks:
                expected = (hunk.old_start - 1 if hunk.old_len else hunk.old_start) + offset
                at = _find(current, hunk.old, expected)
                if at is None:
                    done = bool(hunk.new) and _find(current, hunk.new, expected) is not None
                    reason = (
                        "its result is already in the file (the base has this change)"
                        if done
                        else _why(current, hunk, expected)
                    )
                    failures.append(HunkFailure(name, fp.path, hunk.number, hunk.header, reason))
                    continue
                current = current[:at] + hunk.new + current[at + len(hunk.old) :]
                offset += (at - expected) + len(hunk.new) - len(hunk.old)
                moved = f" (offset {at - expected:+d} lines)" if at != expected else ""
                log.append(f"{name}: {PACKAGE}/{fp.path} hunk {hunk.number} applied{moved}")
            if fp.deleted:
                if current:
                    failures.append(HunkFailure(name, fp.path, None, "", "the patch deletes it and lines remain"))
                state[fp.path] = None
            else:
                state[fp.path] = current
    return state, failures, log


def apply(package_dir: Path, manifest: Path) -> int:
    spec = json.loads(manifest.read_text(encoding="utf-8"))
    base = str(spec.get("base_digest", ""))
    patches = []
    for entry in spec.get("patches", []):
        data = (manifest.parent / entry["file"]).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if entry.get("sha256") and digest != entry["sha256"]:
            print(f"image patches: FAILED: {entry['name']}: sha256 {digest}, the manifest says {entry['sha256']} (end)")
            return 1
        patches.append((entry["name"], data.decode("utf-8")))
    state, failures, log = apply_all(package_dir, patches)
    for line in log:
        print(f"image patches: {line}")
    if failures:
        for failure in failures:
            print(f"image patches: FAILED: {failure.line(base)} (end)")  # (end): the image role quotes up to here
        print(f"image patches: {len(failures)} failed, nothing written to {package_dir}", file=sys.stderr)
        return 1
    for rel, lines in state.items():
        target = package_dir / rel
        if lines is None:
            if target.exists():
                target.unlink()
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("".join(lines), encoding="utf-8")
    print(f"image patches: {len(patches)} patch files, {len(log)} hunks applied to {package_dir} (base {base})")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[1] != "apply":
        print(__doc__, file=sys.stderr)
        return 2
    return apply(Path(argv[2]), Path(argv[3]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
