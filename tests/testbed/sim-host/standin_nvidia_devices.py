#!/usr/bin/python3
"""TEST DOUBLE of the kernel and udev bringing up NVIDIA's device nodes at boot, in the simulated host.

Installed as /usr/lib/standin-host/nvidia-devices, run by standin-nvidia-devices.service early at every boot (a
reboot restarts the sim container with a fresh /dev). When the stand-in driver would load (the installed stand-in
nvidia-smi finds a loadable stand-in nvidia.ko for the running kernel: kernel_module()), it creates the driver's
nodes with that nvidia-smi's ensure_device_nodes(): /dev/nvidia0..N-1 (195:i, N from /etc/nvidia-standin/gpus.json,
default 8), /dev/nvidiactl (195:255), /dev/nvidia-uvm and /dev/nvidia-uvm-tools (510:0, 510:1). No /dev/char links:
as on a real host after a reboot, those exist only once `nvidia-ctk system create-dev-char-symlinks` (or its udev
rule, which does not run in the sim host) made them.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
from pathlib import Path

SMI = Path("/usr/bin/nvidia-smi")
HW = Path("/etc/nvidia-standin/gpus.json")


def main() -> int:
    if not SMI.exists():
        return 0
    loader = importlib.machinery.SourceFileLoader("standin_nvidia_smi", str(SMI))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    if spec is None:
        return 0
    smi = importlib.util.module_from_spec(spec)
    try:
        loader.exec_module(smi)
    except (SyntaxError, ImportError, OSError):  # not the stand-in (a real or broken binary): nothing to do
        return 0
    if not hasattr(smi, "ensure_device_nodes") or smi.kernel_module() is None:
        return 0
    try:
        count = int(json.loads(HW.read_text() or "{}").get("count", 8)) if HW.exists() else 8
    except ValueError:
        count = 8
    for path in smi.ensure_device_nodes(count):
        print(f"created {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
