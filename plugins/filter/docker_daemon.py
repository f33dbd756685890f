"""Filter: whether a daemon.json change needs no action, a dockerd reload or a restart.

The logic lives in plugins/module_utils/docker_daemon.py (pure Python, unit-tested), imported through the collection.
"""

from __future__ import annotations

from ansible_collections.a800.vllm.plugins.module_utils.docker_daemon import daemon_json_change


class FilterModule:
    def filters(self) -> dict:
        return {"daemon_json_change": daemon_json_change}
