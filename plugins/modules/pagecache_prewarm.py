#!/usr/bin/python
"""Ansible module: page-cache residency and prewarm of model weights."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pagecache_prewarm
short_description: Bring model weights into the page cache, at the storage's speed, only when needed
description:
  - Measures the share of the weight files' pages in the page cache (mincore). At or above C(threshold_pct) it
    reads nothing and reports changed=false.
  - Otherwise it refuses, with the numbers, when the weights cannot stay resident next to what the host needs
    (C(headroom_gb)), and reads the missing chunks in parallel (posix_fadvise WILLNEED windows, waited for with
    mincore), writing progress (bytes, GB/s, ETA) to C(progress_file) every second for a caller that polls.
  - Check mode and C(check_only) measure without reading.
options:
  path:
    description: Directory of the weights (symlinks followed).
    type: path
    required: true
  workers:
    description: Parallel readers; 0 chooses from the host's CPUs.
    type: int
    default: 0
  threshold_pct:
    description: Residency at or above which nothing is read.
    type: float
    default: 99.0
  headroom_gb:
    description: Memory (decimal GB) the host keeps for everything else; the RAM guard uses it.
    type: float
    default: 16
  progress_file:
    description: JSON progress written during the read; C(finished) true at the end, also on failure.
    type: path
  check_only:
    description: Only measure the residency.
    type: bool
    default: false
author: a800-vllm project
"""

EXAMPLES = r"""
- name: Prewarm the weights
  pagecache_prewarm:
    path: /data/models/GLM-5.2-NVFP4
    progress_file: /run/weights-prewarm.json
"""

RETURN = r"""
residency:
  description: bytes, pages, resident_pages, resident_bytes, percent of the weight files after the run.
  returned: always
  type: dict
read_bytes:
  description: Bytes read by this run (0 when the set was already resident).
  returned: always
  type: int
gbps:
  description: Read rate of this run in GB/s.
  returned: always
  type: float
"""

import json  # noqa: E402
import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.pagecache import (  # noqa: E402
    default_workers,
    prewarm,
    ram_guard,
    residency,
    weight_files,
)


def write_progress(path: str | None, data: dict) -> None:
    if not path:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(tmp, path)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "workers": {"type": "int", "default": 0},
            "threshold_pct": {"type": "float", "default": 99.0},
            "headroom_gb": {"type": "float", "default": 16},
            "progress_file": {"type": "path"},
            "check_only": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    progress_file = p["progress_file"]
    result: dict = {"changed": False, "read_bytes": 0, "gbps": 0.0}
    write_progress(progress_file, {"finished": False})  # a poller must not read a previous run's end
    try:
        files = weight_files(p["path"])
        if not files:
            module.fail_json(msg=f"no *.safetensors files under {p['path']}", **result)
        before = residency(files)
        result.update(residency=before, files=len(files))
        if before["percent"] >= p["threshold_pct"] or p["check_only"] or module.check_mode:
            result["changed"] = before["percent"] < p["threshold_pct"] and not p["check_only"]
            module.exit_json(**result)
        problem = ram_guard(int(before["bytes"]), int(p["headroom_gb"] * 1e9))
        if problem:
            module.fail_json(msg=f"RAM guard: {problem}", **result)
        workers = p["workers"] or default_workers()
        stats = prewarm(
            files,
            workers,
            on_progress=lambda snap: write_progress(progress_file, {**snap, "finished": False, "workers": workers}),
            before=before,
        )
        result.update(
            changed=True,
            residency=stats["after"],
            before=before,
            read_bytes=stats["read_bytes"],
            seconds=stats["seconds"],
            gbps=stats["gbps"],
            workers=workers,
        )
        module.exit_json(**result)
    finally:
        # the residency measured right after the prewarm (or before it, when nothing was read): what the phase left
        write_progress(
            progress_file,
            {
                "finished": True,
                **{k: result.get(k) for k in ("read_bytes", "gbps")},
                "resident_percent": (result.get("residency") or {}).get("percent"),
            },
        )


if __name__ == "__main__":
    main()
