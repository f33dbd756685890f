"""Replace a file only when its content changes, atomically: a temporary file in the same directory, then
os.replace, so that a reader (a person, node exporter's textfile collector) never sees half a file, and an unchanged
file keeps its mtime. Used on the controller (plugins/action/report_files.py) and on the hosts
(plugins/modules/vllm_readiness.py)."""

from __future__ import annotations

import os
import tempfile


def replace_if_changed(path: str, data: bytes, mode: int = 0o644) -> bool:
    """Write `data` to `path` (its directory must exist) unless the file already holds exactly it; True when
    written."""
    try:
        with open(path, "rb") as current:
            if current.read() == data:
                return False
    except FileNotFoundError:
        pass
    directory, name = os.path.split(path)
    handle, temporary = tempfile.mkstemp(prefix=f".{name}.", dir=directory or ".")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    return True
