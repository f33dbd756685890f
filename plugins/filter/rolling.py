"""Filters: which hosts of a phase may run side by side, and the batches (Ansible's `serial`) that follow from it.

The host and serve phases roll over a serving fleet: a host that goes down (a reboot, a dockerd restart, a new
server) does so only in its own batch, and the next batch starts once it serves again. A host with nothing
disruptive to do needs no such care, so each phase first asks every host, read-only and all at once, what it would do
(playbooks/host.yml, playbooks/serve.yml); the hosts with nothing disruptive then run as the first batch, side by
side, and only the others roll.

Ansible takes the hosts of a play in the order of its host pattern and cuts them into batches by `serial`, a list of
batch sizes whose last one repeats (ansible-core's PlaybookExecutor._get_serialized_batches; docs/field.md#rolling-
batches). A size of 0 would mean every host at once, so a phase where no host is quiet leaves the first batch out.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.a800.vllm.plugins.filter.host_files import dpkg_versions


def roll_batches(quiet: list[str] | None, batch: Any = 1) -> list[Any]:
    """`serial` for a play whose host pattern lists the `quiet` hosts first: all of them in one batch, then the rest
    `batch` at a time (a800_host_batch: a count, a percentage, or a list of them)."""
    rolling = list(batch) if isinstance(batch, (list, tuple)) else [batch]
    if not rolling:
        raise AnsibleFilterError("roll_batches: the batch of the hosts that roll is empty")
    return ([len(quiet)] if quiet else []) + rolling


def container_runtime_plan(now: dict[str, Any], packages: list[str], version: str, proxy_wanted: str) -> dict:
    """Whether the container_runtime role would restart dockerd, with its reasons, from what the host has now:
    `dockerd` (an engine installed), `toolkit` (dpkg-query's lines for the toolkit packages), `proxy_now` (the proxy
    drop-in's text, '' when there is none) and `daemon_json` (daemon_json_change's action: none, reload, restart).
    `toolkit_current`: every toolkit package is installed at `version`, so the role's apt install would change
    nothing (and is skipped)."""
    reasons = []
    if not now.get("dockerd"):
        reasons.append("no Docker engine is installed: the role installs one")
    installed = dpkg_versions(now.get("toolkit", ""))
    off = [f"{p} {installed.get(p, 'not installed')}" for p in packages if installed.get(p) != version]
    if off:
        reasons.append(f"toolkit packages change to {version} ({', '.join(off)}): dockerd restarts for the --gpus hook")
    if (now.get("proxy_now") or "") != (proxy_wanted or ""):
        reasons.append("dockerd's proxy drop-in changes: dockerd restarts")
    if now.get("daemon_json") == "restart":
        reasons.append("daemon.json changes a key a reload does not apply: dockerd restarts")
    return {"restart": bool(reasons), "reasons": reasons, "toolkit_current": not off}


def host_plan(driver: dict[str, Any] | None, runtime: dict[str, Any] | None, serving: bool) -> dict:
    """The host phase's plan for one host: `side_by_side` when neither the driver (nvidia_driver_plan) nor the
    container runtime (container_runtime_plan) would take it down; `detail` says why, for the play's output.
    `serving_undisturbed`: a server runs and nothing disruptive is planned, so the server's own container, which holds
    every GPU through the runtime that stays as it is, already proves what the container runtime role's --gpus all
    check would (roles/container_runtime/tasks/main.yml skips that check then)."""
    if not driver or not runtime:
        return {"side_by_side": False, "serving_undisturbed": False, "detail": "not planned: rolls in its own batch"}
    reasons = ([driver.get("detail", "")] if driver.get("reboot") else []) + list(runtime.get("reasons", []))
    state = "serving" if serving else "not serving"
    if not reasons and not runtime.get("restart"):
        return {"side_by_side": True, "serving_undisturbed": bool(serving),
                "detail": f"{state}; nothing disruptive ({driver.get('detail', '')})"}  # fmt: skip
    stays = "" if driver.get("reboot") else f" ({driver.get('detail', '')})"
    return {"side_by_side": False, "serving_undisturbed": False,
            "detail": f"{state}; rolls: " + "; ".join(reasons) + stays}  # fmt: skip


class FilterModule:
    def filters(self) -> dict:
        return {
            "roll_batches": roll_batches,
            "container_runtime_plan": container_runtime_plan,
            "host_plan": host_plan,
        }
