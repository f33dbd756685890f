#!/usr/bin/python
"""Ansible module: GPU facts from nvidia-smi (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_gpu_facts
short_description: Read the GPUs of a host from nvidia-smi
description:
  - Runs C(nvidia-smi --query-gpu=... --format=csv,noheader,nounits), C(nvidia-smi topo -m) and C(nvidia-smi -q)
    and returns the parsed GPU facts as C(gpu_facts). Changes nothing; supports check mode.
  - The query asks for the GPU state too (MIG mode, ECC mode, pages pending retirement, pending row remappings, row
    remapping failures, in C(gpu_facts.state)); a driver that does not know one of these fields, or C(compute_cap), is
    asked again without it, and C(gpu_facts.unsupported_fields) names what was left out.
  - A host without nvidia-smi reports C(driver_installed=false) instead of failing, so that a bare host can be
    prepared; a driver that is installed but not answering reports C(driver_loaded=false) and its message.
options:
  nvidia_smi:
    description: Name or path of nvidia-smi.
    type: str
    default: nvidia-smi
author: a800-vllm project
"""

EXAMPLES = r"""
- name: Read GPU facts
  nvidia_gpu_facts:
"""

RETURN = r"""
ansible_facts:
  description: >-
    C(gpu_facts) with count, gpus, models, compute_caps, driver_version, topology, nvswitch, state,
    unsupported_fields, ...
  returned: always
  type: dict
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.nvidia_smi import (  # noqa: E402
    OPTIONAL_FIELDS,
    PREFLIGHT_FIELDS,
    NvidiaSmiError,
    invalid_field,
    parse_fabric_states,
    parse_query_csv,
    parse_topology,
    summarize,
)

NVSWITCH_DIR = "/proc/driver/nvidia-nvswitch/devices"


def main() -> None:
    module = AnsibleModule(
        argument_spec={"nvidia_smi": {"type": "str", "default": "nvidia-smi"}}, supports_check_mode=True
    )
    smi = module.get_bin_path(module.params["nvidia_smi"])
    facts: dict = {
        "driver_installed": smi is not None,
        "driver_loaded": False,
        "count": 0,
        "gpus": [],
        "error": None,
        "nvidia_smi": smi,
    }
    if smi is None:
        facts["error"] = "nvidia-smi not found: the NVIDIA driver is not installed"
        module.exit_json(changed=False, ansible_facts={"gpu_facts": facts})

    fields = list(PREFLIGHT_FIELDS)
    facts["unsupported_fields"] = []
    rc, out, err = module.run_command([smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
    # A driver names the first field it does not know (compute_cap before R510): ask again without it.
    while rc != 0:
        unknown = invalid_field(out + err)
        if unknown not in OPTIONAL_FIELDS or unknown not in fields:
            break
        fields.remove(unknown)
        facts["unsupported_fields"].append(unknown)
        rc, out, err = module.run_command([smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
    if rc != 0:
        facts["error"] = (out + err).strip() or f"nvidia-smi exited {rc}"
        module.exit_json(changed=False, ansible_facts={"gpu_facts": facts})
    try:
        rows = parse_query_csv(out, fields)
    except NvidiaSmiError as exc:
        module.fail_json(msg=f"cannot parse nvidia-smi --query-gpu output: {exc}", stdout=out)

    topology: dict = {}
    rc, out, err = module.run_command([smi, "topo", "-m"])
    if rc == 0:
        try:
            topology = parse_topology(out)
        except NvidiaSmiError as exc:
            topology = {"error": str(exc)}
    else:
        topology = {"error": (out + err).strip()}
    rc, out, _ = module.run_command([smi, "-q"])
    fabric = parse_fabric_states(out) if rc == 0 else []
    nvswitches = len(os.listdir(NVSWITCH_DIR)) if os.path.isdir(NVSWITCH_DIR) else 0

    facts.update(summarize(rows, topology, fabric, nvswitches))
    facts["driver_loaded"] = True
    module.exit_json(changed=False, ansible_facts={"gpu_facts": facts})


if __name__ == "__main__":
    main()
