"""Filters: the site's proxy as apt, a task's environment and dockerd each read it.

The logic lives in plugins/module_utils/network.py (pure Python, unit-tested), imported through the collection.
"""

from __future__ import annotations

from ansible_collections.a800.vllm.plugins.module_utils.network import (
    apt_proxy_conf,
    docker_proxy_dropin,
    proxy_checks,
    proxy_environment,
)


class FilterModule:
    def filters(self) -> dict:
        return {
            "proxy_checks": proxy_checks,
            "proxy_environment": proxy_environment,
            "apt_proxy_conf": apt_proxy_conf,
            "docker_proxy_dropin": docker_proxy_dropin,
        }
