"""Which NVIDIA device nodes lack their /dev/char/MAJOR:MINOR symlink (pure functions over a /dev tree).

runc writes a container's device rules for systemd as /dev/char/MAJOR:MINOR paths; a node without that link is
left out of the rules systemd re-applies on every `systemctl daemon-reload`, and the GPUs vanish from running
containers ("Failed to initialize NVML: Unknown Error", NVIDIA/nvidia-docker#1730). NVIDIA's fix creates the links
with `nvidia-ctk system create-dev-char-symlinks --create-all`; this module only reads what is there.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

# The nodes of NVIDIA's driver: /dev/nvidia0..N, nvidiactl, nvidia-uvm(-tools), nvidia-modeset, nvidia-caps/*.
PATTERNS = ("nvidia*", "nvidia-caps/*")


def device_nodes(dev_root: str = "/dev") -> list[dict]:
    """Character devices of NVIDIA's driver under dev_root: path, major, minor (sorted by path)."""
    nodes = []
    root = Path(dev_root)
    for pattern in PATTERNS:
        for path in root.glob(pattern):
            try:
                st = path.lstat()
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode):
                nodes.append({"path": str(path), "major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev)})
    return sorted(nodes, key=lambda n: n["path"])


def link_state(node: dict, dev_char: str = "/dev/char") -> str:
    """ok (the link resolves to the node), missing, or wrong (it points elsewhere)."""
    link = Path(dev_char) / f"{node['major']}:{node['minor']}"
    if not link.is_symlink() and not link.exists():
        return "missing"
    try:
        return "ok" if link.resolve() == Path(node["path"]).resolve() else "wrong"
    except OSError:
        return "wrong"


def dev_char_report(dev_root: str = "/dev", dev_char: str = "/dev/char") -> dict:
    """The nodes, and those whose /dev/char link is missing or points elsewhere."""
    nodes = device_nodes(dev_root)
    for node in nodes:
        node["link"] = link_state(node, dev_char)
    return {
        "nodes": nodes,
        "missing": [n["path"] for n in nodes if n["link"] != "ok"],
        "gpus": len([n for n in nodes if Path(n["path"]).name.removeprefix("nvidia").isdigit()]),
    }
