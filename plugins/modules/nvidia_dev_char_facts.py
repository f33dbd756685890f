#!/usr/bin/python
"""Ansible module: NVIDIA device nodes and their /dev/char symlinks (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_dev_char_facts
short_description: Find the NVIDIA device nodes that have no /dev/char/MAJOR:MINOR symlink
description:
  - Lists the character devices of NVIDIA's driver (C(/dev/nvidia*), C(/dev/nvidia-caps/*)) with their major and
    minor numbers, and whether C(/dev/char/MAJOR:MINOR) is a symlink resolving to each.
  - Without those links, a C(systemctl daemon-reload) detaches the GPUs from running containers on hosts where
    systemd manages the container cgroups (NVIDIA/nvidia-docker#1730); C(nvidia-ctk system create-dev-char-symlinks
    --create-all) creates them.
  - Changes nothing; supports check mode.
options:
  dev_root:
    description: Where the device nodes are.
    type: path
    default: /dev
  dev_char:
    description: Where the symlinks are.
    type: path
    default: /dev/char
author: a800-vllm project
"""

EXAMPLES = r"""
- name: Find NVIDIA device nodes without a /dev/char link
  a800.vllm.nvidia_dev_char_facts:
  register: dev_char
"""

RETURN = r"""
nodes:
  description: The device nodes (path, major, minor, link = ok|missing|wrong).
  returned: always
  type: list
  elements: dict
missing:
  description: Paths of the nodes whose link is missing or points elsewhere.
  returned: always
  type: list
  elements: str
gpus:
  description: How many /dev/nvidiaN GPU nodes there are.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.dev_char import dev_char_report  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dev_root": {"type": "path", "default": "/dev"},
            "dev_char": {"type": "path", "default": "/dev/char"},
        },
        supports_check_mode=True,
    )
    module.exit_json(changed=False, **dev_char_report(module.params["dev_root"], module.params["dev_char"]))


if __name__ == "__main__":
    main()
