"""Docker from the snap on a serving host: found (read-only) and judged (pure Python, unit-tested).

The Ubuntu Server installer offers Docker as a snap (Canonical's `docker` snap). The host phase cannot serve with it
(docs/field.md#docker-from-the-snap): NVIDIA's container toolkit does not support a Docker installed with snap (its
own tracker holds that support as an open feature request, NVIDIA/nvidia-container-toolkit#522), the snap's dockerd
reads `/var/snap/docker/current/config/daemon.json`, not the `/etc/docker/daemon.json` the role configures, and since
the snap's v29.2.0 it fails to start GPU containers when the toolkit is installed as Debian packages, which is what
the role installs (canonical/docker-snap README, issue #357). The role would also install the distribution's
docker.io beside it (it looks for dockerd only in /usr/bin and /usr/sbin). So the preflight stops, with the
migration; nothing is changed.

serving_host_facts reports `snap_docker_facts()` as host_facts.docker_snap; the preflight and the role
container_runtime judge it with `docker_snap_check()`.
"""

from __future__ import annotations

import os
from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, check

# Where snapd puts an installed snap: its commands in /snap/bin (links to /usr/bin/snap, which runs the snap's app),
# its revisions under /snap/<name>, its data under /var/snap/<name> (snapcraft.io/docs/data-locations).
SNAP_DOCKER_COMMAND = "/snap/bin/docker"
SNAP_DOCKER_DIR = "/snap/docker"
SNAP_DOCKER_DATA = "/var/snap/docker"
SNAP_LAUNCHER = "/usr/bin/snap"

MIGRATION = (
    "migrate to the distribution's Docker: save the images you need (`sudo docker save -o /root/images.tar IMAGE...`), "
    "`sudo snap remove --purge docker` (it removes the snap and its data under /var/snap/docker, which is not "
    "migrated), "
    "then run the host phase (`ansible-playbook site.yml --tags host`)"
)


def snap_docker_facts(root: str = "/", docker_on_path: str | None = None) -> dict[str, Any]:
    """Whether Docker is installed from the snap, from what snapd leaves on disk (read-only).

    installed: /snap/bin/docker exists (a link, also a dangling one), or /snap/docker, or the `docker` found on PATH
    is the snap's (under /snap/, or resolving to snapd's launcher /usr/bin/snap); evidence: what was found;
    data_dir: /var/snap/docker when it exists (also left behind by a `snap remove` without --purge). `root` is for
    tests (a directory standing for /).
    """

    def at(path: str) -> str:
        return os.path.join(root, path.lstrip("/"))

    evidence = []
    if os.path.lexists(at(SNAP_DOCKER_COMMAND)):
        evidence.append(SNAP_DOCKER_COMMAND)
    if os.path.isdir(at(SNAP_DOCKER_DIR)):
        evidence.append(SNAP_DOCKER_DIR)
    if docker_on_path:
        resolved = os.path.realpath(docker_on_path)
        if docker_on_path.startswith("/snap/") or resolved.startswith("/snap/") or resolved == SNAP_LAUNCHER:
            evidence.append(f"docker on PATH: {docker_on_path} -> {resolved}")
    return {
        "installed": bool(evidence),
        "evidence": evidence,
        "data_dir": SNAP_DOCKER_DATA if os.path.isdir(at(SNAP_DOCKER_DATA)) else None,
        "docker_on_path": docker_on_path,
    }


def docker_snap_check(facts: dict[str, Any] | None, docker_install: str = "auto") -> dict[str, Any]:
    """The check record `docker_snap`: fail when Docker is installed from the snap, with the migration steps;
    `docker_install` is bom.docker.install (auto: the host phase installs docker.io after the removal)."""
    facts = facts or {}
    fact = "host_facts.docker_snap"
    if not facts.get("installed"):
        leftover = f" (leftover data of a removed snap at {facts['data_dir']}, unused)" if facts.get("data_dir") else ""
        return check("docker_snap", PASS, fact, False, False, f"Docker is not installed from the snap{leftover}")
    after = (
        ", which installs the distribution's docker.io pinned for this release (bom.docker.install: auto)"
        if docker_install == "auto"
        else "; bom.docker.install is never: install docker.io (or docker-ce) yourself after the removal, or set "
        "bom.docker.install: auto and the host phase installs docker.io"
    )
    return check(
        "docker_snap",
        FAIL,
        fact,
        True,
        False,
        f"Docker is installed from the snap ({', '.join(facts.get('evidence') or [])}): NVIDIA's container toolkit "
        "does not support a snap-installed Docker (NVIDIA/nvidia-container-toolkit#522), the snap's dockerd reads "
        "/var/snap/docker/current/config/daemon.json, not the /etc/docker/daemon.json the host phase configures, and "
        "since the snap's v29.2.0 it fails GPU containers when the toolkit is installed as Debian packages "
        "(canonical/docker-snap#357); the host phase would install docker.io beside it. Nothing was changed",
        f"{MIGRATION}{after}; then `sudo docker load -i /root/images.tar`",
    )
