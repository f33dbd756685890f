#!/usr/bin/python3
"""TEST DOUBLE of systemd re-applying runc's device rules on every `systemctl daemon-reload` (a systemd generator).

Installed in the simulated host as /usr/lib/systemd/system-generators/standin-runc-reload: systemd runs every
generator at boot and again on each daemon-reload (systemd.generator(7)). On systemd 252 in the sim host, generators
run as root in PID 1's mount namespace, so this one can write into a running container's root filesystem directly:
no path unit is needed. It generates no units.

What it models (docs/testbed.md, "GPUs lost on systemctl daemon-reload"): where systemd manages a container's cgroup,
runc hands it the device rules as /dev/char/MAJOR:MINOR paths and skips those that do not exist; NVIDIA's device
nodes have no /dev/char links unless `nvidia-ctk system create-dev-char-symlinks` made them. On a reload, systemd
re-applies the unit's rules and a container created without the links loses its GPUs: nvidia-smi inside prints
"Failed to initialize NVML: Unknown Error" until the container is re-created.

The stand-in NVIDIA hook records every --gpus container under /run/nvidia-standin/containers/<id>.json (its root
filesystem, its bundle, protected or not). Here each record of a container that is no longer running (its bundle
gone, its process gone) is dropped; each running, unprotected container gets the marker etc/nvidia-standin/nvml-lost
in its root filesystem, which the injected nvidia-smi reads. A reload never fails or waits because of this: every
error is swallowed, the work is bounded by a deadline, and the exit status is always 0.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

RECORDS = Path("/run/nvidia-standin/containers")
LOG = Path("/run/nvidia-standin/reload.log")
MARKER = "etc/nvidia-standin/nvml-lost"
DEADLINE_S = 5.0


def running(rec: dict, proc: Path = Path("/proc")) -> bool:
    """The container still runs: its OCI bundle is there and its init process (a pid of this host) is alive."""
    bundle = rec.get("bundle")
    if not bundle or not (Path(bundle) / "config.json").exists():
        return False
    pid = rec.get("pid")
    return pid is None or (proc / str(pid)).exists()


def mark(rec: dict) -> bool:
    """Take the GPUs away from the container: the marker in its root filesystem. True when newly marked."""
    marker = Path(rec["rootfs"]) / MARKER
    if marker.exists():
        return False
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("GPUs lost: systemd re-applied device rules without /dev/char links (stand-in)\n")
    return True


def reload(records: Path = RECORDS, proc: Path = Path("/proc"), deadline_s: float = DEADLINE_S) -> dict[str, list]:
    """One daemon-reload: {"dropped": [ids], "marked": [ids], "protected": [ids], "errors": [text]}."""
    out: dict[str, list] = {"dropped": [], "marked": [], "protected": [], "errors": []}
    end = time.monotonic() + deadline_s
    try:
        files = sorted(records.glob("*.json"))
    except OSError as e:
        out["errors"].append(str(e))
        return out
    for path in files:
        if time.monotonic() > end:
            out["errors"].append("deadline reached")
            break
        try:
            rec = json.loads(path.read_text())
            cid = rec.get("id", path.stem)
            if not running(rec, proc):
                path.unlink(missing_ok=True)
                out["dropped"].append(cid)
            elif rec.get("protected"):
                out["protected"].append(cid)
            elif mark(rec) or not rec.get("nvml_lost"):
                rec["nvml_lost"] = True
                path.write_text(json.dumps(rec, indent=1) + "\n")
                out["marked"].append(cid)
        except (OSError, ValueError, KeyError, TypeError) as e:
            out["errors"].append(f"{path.name}: {e}")
    return out


def main() -> int:
    try:
        result = reload(RECORDS, Path("/proc"), DEADLINE_S)
        if any(result.values()):
            LOG.parent.mkdir(parents=True, exist_ok=True)
            with LOG.open("a") as log:
                log.write(json.dumps({"time": time.time(), "argv": sys.argv[1:], **result}) + "\n")
    except Exception:  # a generator's failure must never disturb the reload
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
