#!/usr/bin/python
"""Ansible module: several files, their states and read-only commands, in one module run (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_read
short_description: The states of files, the text of small files and read-only commands, in one module run
description:
  - A role that reads several things from a host before it decides reads them here in one module run instead of
    one task each. Every module run costs the host a Python start and Ansible's imports (about 0.15 s on the
    simulated host, docs/testbed.md#controller-reads), whatever it does.
  - I(paths) are stat-ed as the C(file), C(copy) and C(template) modules would compare them; a write whose file
    already matches (the filter C(a800.vllm.file_current)) is skipped instead of run to find that out.
  - Changes nothing; supports check mode.
options:
  paths:
    description: Files or directories whose state (C(file), C(directory), C(absent), C(link), C(other)), mode,
      owner, group and, for a regular file, SHA-1 are returned (C(paths)). A symbolic link is not followed; it is
      C(link), which no write matches, so the write task decides about it as it always did.
    type: list
    elements: path
    default: []
  contents:
    description: Small text files whose content is returned (C(contents)); a missing file is C(found=false).
    type: list
    elements: path
    default: []
  commands:
    description: Read-only commands by name, each an argv list run without a shell, in order; each returns rc,
      stdout and stderr (C(commands)). A program that is not installed is rc 127, as a shell says it.
    type: dict
    default: {}
author: a800-vllm project
"""

EXAMPLES = r"""
- name: Read the driver packages and the role's files
  a800.vllm.host_read:
    paths: [/etc/modprobe.d/blacklist-nouveau.conf]
    contents: [/etc/systemd/system/docker.service.d/http-proxy.conf]
    commands:
      dpkg: [dpkg-query, -W, "-f=${Package} ${Version}\\n", nvidia-driver-580]
  register: read
"""

RETURN = r"""
paths:
  description: path -> {state, mode ('0644'), owner, group, sha1 (regular files)}; only state for absent and link.
  returned: always
  type: dict
contents:
  description: path -> {found, content}; content is the file's text (UTF-8, undecodable bytes replaced).
  returned: always
  type: dict
commands:
  description: name -> {rc, stdout, stderr}, stdout and stderr without their trailing newline.
  returned: always
  type: dict
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.host_paths import path_state  # noqa: E402

MAX_CONTENT = 1024 * 1024  # contents are configuration files; a larger one is a mistake in the list


def content(path: str) -> dict:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONTENT + 1)
    except FileNotFoundError:
        return {"found": False, "content": ""}
    if len(data) > MAX_CONTENT:
        raise ValueError(f"{path} is larger than {MAX_CONTENT} bytes: read it with slurp, not host_read's contents")
    return {"found": True, "content": data.decode("utf-8", errors="replace")}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "list", "elements": "path", "default": []},
            "contents": {"type": "list", "elements": "path", "default": []},
            "commands": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    commands = {}
    for name, argv in module.params["commands"].items():
        if not isinstance(argv, list) or not argv:
            module.fail_json(msg=f"host_read: command {name!r} must be a non-empty argv list, got {argv!r}")
        argv = [str(arg) for arg in argv]
        program = argv[0] if os.path.isabs(argv[0]) else module.get_bin_path(argv[0])
        if not program or not os.access(program, os.X_OK):
            commands[name] = {"rc": 127, "stdout": "", "stderr": f"{argv[0]}: command not found"}
            continue
        rc, out, err = module.run_command(argv)
        commands[name] = {"rc": rc, "stdout": out.rstrip("\n"), "stderr": err.rstrip("\n")}
    try:
        paths = {path: path_state(path) for path in module.params["paths"]}
        contents = {path: content(path) for path in module.params["contents"]}
    except (OSError, ValueError) as err:
        module.fail_json(msg=f"host_read: {err}")
    module.exit_json(changed=False, paths=paths, contents=contents, commands=commands)


if __name__ == "__main__":
    main()
