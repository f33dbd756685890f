#!/usr/bin/python
"""Ansible module: what the serve role judges on a serving host, read in one run (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: serving_state
short_description: Read the serving container, the images, the serving port, the running containers and the key file
description:
  - One run instead of seven tasks (plugins/module_utils/serving_state.py), with their shapes.
  - C(current) - the container named I(container), as community.docker.docker_container_info returns it.
  - C(images) - the inspect of I(images) and of the container's own image, those on the host, as
    community.docker.docker_image_info returns them.
  - C(port_listener) - what C(ss -H -ltn 'sport = :PORT') prints (empty when nothing listens).
  - C(running), C(running_inspect) - the running containers' IDs (C(docker ps --quiet --no-trunc)) and C(docker
    container inspect) of them as text (empty without any).
  - C(key) - I(key_path) as ansible.builtin.stat returns it (exists, mode, sha1 checksum).
  - C(rejected) - I(rejected_path) as ansible.builtin.slurp returns it (content, base64), empty without the file.
  - C(last_good) - with I(last_good_path), that file as C(key) is (exists, mode, sha1 checksum).
  - Fails, naming the command, when the Docker engine or ss does not answer. The result holds the containers'
    environments, so use no_log.
  - Changes nothing; supports check mode.
options:
  container: {description: the serving container's name, type: str, required: true}
  images: {description: the images to inspect besides the container's own, type: list, elements: str, default: []}
  port: {description: the serving port, type: int, required: true}
  key_path: {description: the API key file, type: path, required: true}
  rejected_path: {description: the releases rolled back on this host (rejected.json), type: path, required: true}
  last_good_path: {description: the last known-good launch (last-good.json), type: path}
  paths:
    description: >-
      Files and directories the serve role writes; their states (C(paths), as host_read returns them) let it skip
      the writes whose files are in place (a800.vllm.file_current).
    type: list
    elements: path
    default: []
author: a800-vllm project
"""

EXAMPLES = r"""
- name: Read what the serve role judges
  a800.vllm.serving_state:
    container: glm52-nvfp4
    images: [vllm/vllm-openai:v0.26.0-glm52-sm80]
    port: 8001
    key_path: /etc/a800-vllm/glm52-nvfp4/api-key
    rejected_path: /etc/a800-vllm/glm52-nvfp4/rejected.json
  register: state
  no_log: true
"""

RETURN = r"""
serving_state:
  description: current, images, port_listener, running, running_inspect, key, rejected, last_good, paths.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.host_paths import path_state  # noqa: E402
from ansible_collections.a800.vllm.plugins.module_utils.serving_state import ReadError, serving_state  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "container": {"type": "str", "required": True},
            "images": {"type": "list", "elements": "str", "default": []},
            "port": {"type": "int", "required": True},
            "key_path": {"type": "path", "required": True},
            "rejected_path": {"type": "path", "required": True},
            "last_good_path": {"type": "path"},
            "paths": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,
    )

    def run(argv):
        rc, out, err = module.run_command(list(argv))
        return rc, out, err

    p = module.params
    try:
        state = serving_state(
            run, p["container"], p["images"], p["port"], p["key_path"], p["rejected_path"], p["last_good_path"]
        )
    except ReadError as exc:
        module.fail_json(msg=str(exc))
    state["paths"] = {path: path_state(path) for path in p["paths"]}
    module.exit_json(changed=False, serving_state=state)


if __name__ == "__main__":
    main()
