"""Filters: whether a daemon.json change needs no action, a dockerd reload or a restart, and whether it would switch
the engine's image store; and whether the host's Docker is the snap, which the container toolkit does not support
(the preflight and the role container_runtime stop at either).

The logic lives in plugins/module_utils/docker_daemon.py and docker_snap.py (pure Python, unit-tested), imported
through the collection.
"""

from __future__ import annotations

from ansible_collections.a800.vllm.plugins.module_utils.docker_daemon import (
    daemon_image_store_check,
    daemon_json_change,
    docker_image_store,
    registry_pull_needed,
)
from ansible_collections.a800.vllm.plugins.module_utils.docker_snap import docker_snap_check


class FilterModule:
    def filters(self) -> dict:
        return {
            "daemon_json_change": daemon_json_change,
            "daemon_image_store_check": daemon_image_store_check,
            "docker_image_store": docker_image_store,
            "docker_snap_check": docker_snap_check,
            "registry_pull_needed": registry_pull_needed,
        }
