#!/usr/bin/python
"""Ansible module: who already serves a repository in the host's apt sources (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_sources_facts
short_description: Find the apt source entries that already serve a repository
description:
  - Reads C(/etc/apt/sources.list) and C(/etc/apt/sources.list.d/*.list|*.sources) (one-line and deb822 formats)
    without running apt, so that it works on a host whose sources apt already refuses.
  - Returns the entries for the given URI and suite that live in files other than C(own_file), and which of those
    files hold nothing else (they can be removed whole).
  - Changes nothing; supports check mode.
options:
  uri:
    description: The repository URI (apt's C($(ARCH)) and trailing slashes are normalised).
    type: str
    required: true
  suite:
    description: The suite; C(/) for a flat repository.
    type: str
    default: /
  own_file:
    description: The file the role itself writes for this repository (its entries are not "existing").
    type: path
    required: true
  arch:
    description: Architecture substituted for C($(ARCH)).
    type: str
    default: amd64
author: a800-vllm project
"""

EXAMPLES = r"""
- name: Find NVIDIA's repository among the host's sources
  a800.vllm.apt_sources_facts:
    uri: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/
    own_file: /etc/apt/sources.list.d/nvidia-cuda.sources
"""

RETURN = r"""
existing:
  description: Entries serving the repository outside own_file (file, line, format, uri, suite, signed_by).
  returned: always
  type: list
  elements: dict
files:
  description: The files holding those entries.
  returned: always
  type: list
  elements: str
exclusive_files:
  description: The files of C(files) whose every entry serves this repository.
  returned: always
  type: list
  elements: str
own:
  description: Whether own_file already has an entry for it.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.apt_sources import entries_for, read_sources  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "uri": {"type": "str", "required": True},
            "suite": {"type": "str", "default": "/"},
            "own_file": {"type": "path", "required": True},
            "arch": {"type": "str", "default": "amd64"},
        },
        supports_check_mode=True,
    )
    p = module.params
    entries = read_sources()
    serving = entries_for(entries, p["uri"], p["suite"], p["arch"])
    existing = [e for e in serving if e["file"] != p["own_file"]]
    files = sorted({e["file"] for e in existing})
    module.exit_json(
        changed=False,
        existing=existing,
        files=files,
        exclusive_files=[f for f in files if all(e in serving for e in entries if e["file"] == f)],
        own=any(e["file"] == p["own_file"] for e in serving),
    )


if __name__ == "__main__":
    main()
