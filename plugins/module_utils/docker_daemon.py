"""What a daemon.json change costs the running containers: nothing, a reload, or a restart (pure, unit-tested).

dockerd re-reads some keys on SIGHUP (`systemctl reload docker`) without stopping anything; the list is the dockerd
reference's "Configuration reload behavior". A change to any other key needs a restart; with live-restore in effect
(itself reloadable: the Docker docs' "Live restore" page enables it with a reload) the containers keep running
through it.
"""

from __future__ import annotations

from typing import Any

RELOADABLE_KEYS = frozenset(
    {
        "debug",
        "labels",
        "live-restore",
        "max-concurrent-downloads",
        "max-concurrent-uploads",
        "max-download-attempts",
        "default-runtime",
        "runtimes",
        "authorization-plugins",
        "allow-nondistributable-artifacts",
        "insecure-registries",
        "registry-mirrors",
        "shutdown-timeout",
        "features",
    }
)


def daemon_json_change(current: Any, wanted: Any) -> dict[str, Any]:
    """{changed_keys, action: none|reload|restart, restart_keys}: the top-level keys whose value differs."""
    current, wanted = dict(current or {}), dict(wanted or {})
    changed = sorted(k for k in set(current) | set(wanted) if current.get(k, object()) != wanted.get(k, object()))
    restart_keys = [k for k in changed if k not in RELOADABLE_KEYS]
    action = "restart" if restart_keys else ("reload" if changed else "none")
    return {"changed_keys": changed, "action": action, "restart_keys": restart_keys}
