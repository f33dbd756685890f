#!/usr/bin/python
"""Ansible module: the host facts a model server depends on (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: serving_host_facts
short_description: RAM, weights storage, kernel, Secure Boot state, a .run-installed driver and a Docker snap
description:
  - Reads C(/proc/meminfo), the filesystem that holds (or will hold) the weights, the kernel release and the
    Secure Boot state, and returns them as C(host_facts). Changes nothing; supports check mode.
  - C(docker_snap) says whether Docker is installed from the snap (C(/snap/bin/docker), C(/snap/docker), or the
    C(docker) on PATH is the snap's), which the container toolkit does not support
    (plugins/module_utils/docker_snap.py).
  - C(shm_bytes) is the size of C(/dev/shm) in bytes as C(df -B1 --output=size /dev/shm) prints it (blocks times
    fragment size), as a string; empty without a C(/dev/shm).
  - With I(apt_deps), C(apt_deps) says whether the apt and deb822_repository modules find their Python libraries
    (plugins/module_utils/apt_preview.py, as the apt_deps_facts module), so that the preflight reads it in this run.
options:
  weights_path:
    description: Directory of the model weights. When it does not exist yet, its nearest existing parent is measured.
    type: path
    required: true
  apt_deps:
    description: Also probe python3-apt and python3-debian (C(apt_deps)).
    type: bool
    default: false
author: a800-vllm project
"""

EXAMPLES = r"""
- name: Read host facts
  serving_host_facts:
    weights_path: /data/models/GLM-5.2-NVFP4
"""

RETURN = r"""
ansible_facts:
  description: >-
    C(host_facts) with mem_total_gib, mem_available_gib, cpus, kernel, weights, secure_boot, runfile_driver,
    docker_snap, shm_bytes, and apt_deps when asked.
  returned: always
  type: dict
"""

import glob  # noqa: E402
import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.common.respawn import probe_interpreters_for_module  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.apt_preview import apt_deps  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.docker_snap import snap_docker_facts  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.pagecache import meminfo  # noqa: E402

GIB = 1024**3
RUNFILE_UNINSTALLER = "/usr/bin/nvidia-uninstall"
SECURE_BOOT_VAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def mount_of(path: str) -> tuple[str, str, str]:
    """(mount point, filesystem type, source) of the mount holding path."""
    best = ("/", "unknown", "unknown")
    with open("/proc/mounts", encoding="utf-8") as handle:
        for line in handle:
            source, point, fstype = line.split()[:3]
            point = point.replace("\\040", " ")
            if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best[0]):
                best = (point, fstype, source)
    return best


def weights_facts(path: str) -> dict:
    probe = os.path.realpath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    stat = os.statvfs(probe)
    point, fstype, source = mount_of(probe)
    facts = {
        "path": path,
        "exists": os.path.isdir(path),
        "measured_at": probe,
        "mount_point": point,
        "fs_type": fstype,
        "device": source,
        "free_gib": round(stat.f_bavail * stat.f_frsize / GIB, 1),
        "total_gib": round(stat.f_blocks * stat.f_frsize / GIB, 1),
        "shards": 0,
        "size_gib": 0.0,
    }
    if facts["exists"]:
        shards = glob.glob(os.path.join(path, "*.safetensors"))
        facts["shards"] = len(shards)
        facts["size_gib"] = round(sum(os.path.getsize(s) for s in shards) / GIB, 2)
    return facts


def shm_bytes(path: str = "/dev/shm") -> str:
    """The size of path's filesystem in bytes, as df -B1 --output=size prints it; empty when there is none."""
    try:
        stat = os.statvfs(path)
    except OSError:
        return ""
    return str(stat.f_blocks * (stat.f_frsize or stat.f_bsize))


def secure_boot(module: AnsibleModule) -> str:
    mokutil = module.get_bin_path("mokutil")
    if mokutil:
        _, out, err = module.run_command([mokutil, "--sb-state"])
        text = (out + err).lower()
        if "enabled" in text:
            return "enabled"
        if "disabled" in text:
            return "disabled"
        if "doesn't support" in text or "not supported" in text:
            return "not supported (legacy BIOS)"
    if os.path.exists(SECURE_BOOT_VAR):
        with open(SECURE_BOOT_VAR, "rb") as handle:
            data = handle.read()
        return "enabled" if data[-1:] == b"\x01" else "disabled"
    if not os.path.isdir("/sys/firmware/efi"):
        return "not supported (legacy BIOS or not visible)"
    return "unknown"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "weights_path": {"type": "path", "required": True},
            "apt_deps": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    mem = meminfo()
    facts = {
        "mem_total_gib": round(mem["MemTotal"] / GIB, 1),
        "mem_available_gib": round(mem.get("MemAvailable", mem["MemFree"]) / GIB, 1),
        "page_cache_gib": round(mem.get("Cached", 0) / GIB, 1),
        "cpus": os.cpu_count(),
        "kernel": os.uname().release,
        "weights": weights_facts(module.params["weights_path"]),
        "secure_boot": secure_boot(module),
        # NVIDIA's .run installer leaves its uninstaller here (CUDA Installation Guide, conflicting methods)
        "runfile_driver": RUNFILE_UNINSTALLER if os.path.exists(RUNFILE_UNINSTALLER) else None,
        # Docker from the snap, which the container toolkit does not support (docs/field.md#docker-from-the-snap)
        "docker_snap": snap_docker_facts(docker_on_path=module.get_bin_path("docker")),
        "shm_bytes": shm_bytes(),
    }
    if module.params["apt_deps"]:
        facts["apt_deps"] = apt_deps(probe_interpreters_for_module)
    module.exit_json(changed=False, ansible_facts={"host_facts": facts})


if __name__ == "__main__":
    main()
