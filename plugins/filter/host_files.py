"""Filter: whether a file or directory on the host is already what a write task would make of it.

A `copy`, `template` or `file` task that finds its file in place still costs the host one or two module runs (a
stat, then the file module for the attributes). A role that read its files beforehand with `a800.vllm.host_read`
(one module run for all of them) skips the writes whose files already match, and runs the others as before:

    when: not (__reads.paths | a800.vllm.file_current(__role_files.limits))

where `__role_files.limits` is the file as the task writes it ({dest, content, mode, owner, group}; state directory
or absent for the file module), so the task and its condition read the same values; path and keywords work too.

It answers true only where the write would change nothing: the path was read, is of the right kind, its SHA-1 is
that of the content (what ansible.builtin.copy compares, its `checksum`), and each of mode, owner and group that the
task sets is the file's. Anything it cannot tell (a path not read, a symbolic mode such as u=rw) is false, so the
task runs and decides as it always did.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError


def _octal(mode: Any) -> str | None:
    """'0644', '644' and 420 (YAML's 0644) as '0644'; None for a mode that is not octal (u=rw,g=r)."""
    if isinstance(mode, bool):
        return None
    if isinstance(mode, int):
        return f"{mode:04o}"
    try:
        return f"{int(str(mode), 8):04o}"
    except ValueError:
        return None


def file_current(
    states: Mapping[str, Any] | None,
    path: str | Mapping[str, Any],
    content: str | None = None,
    mode: Any = None,
    owner: str | None = None,
    group: str | None = None,
    state: str = "file",
) -> bool:
    """True when `path`, as host_read read it, is already the file (with `content`), directory or absence that the
    write task would make; False when it would change something or when that cannot be told. `path` may be the
    task's file as a mapping (dest or path, content, mode, owner, group, state)."""
    if isinstance(path, Mapping):
        spec = path
        path = file_path(spec)
        content, mode = spec.get("content", content), spec.get("mode", mode)
        owner, group, state = spec.get("owner", owner), spec.get("group", group), spec.get("state", state)
    if state not in ("file", "directory", "absent"):
        raise AnsibleFilterError(f"file_current: state must be file, directory or absent, not {state!r}")
    if state == "file" and content is None:
        raise AnsibleFilterError(f"file_current: the content of {path} is needed to compare a file")
    now = (states or {}).get(path)
    if not now:
        return False
    if state == "absent" or now.get("state") != state:
        return now.get("state") == state
    if state == "file":
        text = content if isinstance(content, bytes) else str(content).encode("utf-8")
        if hashlib.sha1(text).hexdigest() != now.get("sha1"):  # copy's checksum, not security
            return False
    if mode is not None and (_octal(mode) is None or _octal(mode) != now.get("mode")):
        return False
    return all(want is None or str(want) == now.get(key) for key, want in (("owner", owner), ("group", group)))


def dpkg_versions(text: str) -> dict[str, str]:
    """`dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n'` as package -> version, installed ones only
    (status ii or hi: wanted install or hold, installed)."""
    out = {}
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2][:2] in ("ii", "hi"):
            out[fields[0]] = fields[1]
    return out


def dpkg_missing(text: str, packages: list[str]) -> list[str]:
    """The packages of `packages` that the dpkg-query above does not show installed (any version)."""
    installed = dpkg_versions(text)
    return [name for name in packages if name not in installed]


def file_path(spec: Mapping[str, Any]) -> str:
    """The path of a task's file as a mapping (dest, or path for the file module): what host_read is given."""
    path = spec.get("dest") or spec.get("path")
    if not path:
        raise AnsibleFilterError(f"file_path: {dict(spec)!r} has no dest or path")
    return path


class FilterModule:
    def filters(self) -> dict:
        return {"file_current": file_current, "file_path": file_path, "dpkg_missing": dpkg_missing}
