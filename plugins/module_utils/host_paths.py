"""The state of a path as a write task compares it (plugins/filter/host_files.py, file_current): read by host_read
and by serving_state in the module run they make anyway, so that a write whose file is in place costs no module run."""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import stat
from typing import Any


def _name(lookup, ident: int) -> str:
    try:
        return lookup(ident)[0]
    except KeyError:
        return str(ident)


def path_state(path: str) -> dict[str, Any]:
    """{state, mode ('0644'), owner, group, sha1 (a regular file)}; only {state} for absent and link. A symbolic link
    is not followed: no write matches it, so the write task decides about it as it always did."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {"state": "absent"}
    if stat.S_ISLNK(st.st_mode):
        return {"state": "link"}
    kind = "file" if stat.S_ISREG(st.st_mode) else "directory" if stat.S_ISDIR(st.st_mode) else "other"
    out = {
        "state": kind,
        "mode": f"{stat.S_IMODE(st.st_mode):04o}",
        "owner": _name(pwd.getpwuid, st.st_uid),
        "group": _name(grp.getgrgid, st.st_gid),
    }
    if kind == "file":
        digest = hashlib.sha1()  # what the copy module compares (its checksum)
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        out["sha1"] = digest.hexdigest()
    return out
