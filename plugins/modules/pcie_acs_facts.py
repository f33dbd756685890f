#!/usr/bin/python
"""Ansible module: PCIe ACS / IOMMU report of a GPU host (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pcie_acs_facts
short_description: Report PCIe ACS redirection and IOMMU mode, which make NCCL peer-to-peer slow or hang
description:
  - Runs C(lspci -D -vvv), reads C(/proc/cmdline), C(/sys/class/iommu) and the IOMMU groups' C(type), and
    returns C(pcie_acs_facts) - the PCIe bridges with ACS redirection (C(ReqRedir+)/C(CmpltRedir+)), those of
    them above the NVIDIA GPUs, the IOMMU mode, a risk level (C(none), C(low), C(high), C(unknown)), a message,
    the fix and a one-line C(summary). Changes nothing; supports check mode.
  - lspci shows the ACS capability only to root, so run it with become; without root, or without
    lspci (pciutils), the risk is C(unknown) and the module does not fail.
options:
  lspci:
    description: Name or path of lspci.
    type: str
    default: lspci
author: a800-vllm project
"""

EXAMPLES = r"""
- name: Read the PCIe ACS / IOMMU state
  pcie_acs_facts:
  become: true
"""

RETURN = r"""
ansible_facts:
  description: >-
    C(pcie_acs_facts) with risk, message, fix, summary (one line of the three), lspci (ok, an error or
    access denied), gpus,
    acs_devices, redirect_bridges, gpu_path_redirect, iommu (active, count, mode) and cmdline.
  returned: always
  type: dict
"""

import glob  # noqa: E402
import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.pcie_acs import summarize  # noqa: E402

IOMMU_CLASS_DIR = "/sys/class/iommu"
IOMMU_GROUP_TYPES = "/sys/kernel/iommu_groups/*/type"


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def main() -> None:
    module = AnsibleModule(argument_spec={"lspci": {"type": "str", "default": "lspci"}}, supports_check_mode=True)
    cmdline = _read("/proc/cmdline")
    iommu_count = len(os.listdir(IOMMU_CLASS_DIR)) if os.path.isdir(IOMMU_CLASS_DIR) else 0
    group_types = [_read(path).strip() for path in sorted(glob.glob(IOMMU_GROUP_TYPES))]

    lspci = module.get_bin_path(module.params["lspci"])
    text: str | None = None
    error: str | None = None
    if lspci is None:
        error = "lspci not installed (package pciutils)"
    else:
        rc, out, err = module.run_command([lspci, "-D", "-vvv"], environ_update={"LC_ALL": "C"})
        if rc == 0:
            text = out
        else:
            error = f"lspci exited {rc}: {(err or out).strip()[-300:]}"
    facts = summarize(text, cmdline, iommu_count, group_types, lspci_error=error)
    facts["lspci_path"] = lspci
    module.exit_json(changed=False, ansible_facts={"pcie_acs_facts": facts})


if __name__ == "__main__":
    main()
