"""What a daemon.json change costs the running containers: nothing, a reload, or a restart; and whether it would
switch Docker's image store (pure, unit-tested).

dockerd re-reads some keys on SIGHUP (`systemctl reload docker`) without stopping anything; the list is the dockerd
reference's "Configuration reload behavior". A change to any other key needs a restart; with live-restore in effect
(itself reloadable: the Docker docs' "Live restore" page enables it with a reload) the containers keep running
through it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, PENDING, check

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


# The image store (docs/testbed.md, "Docker's containerd image store"): daemon.json's features.containerd-snapshotter
# chooses it when dockerd starts (Docker 29 uses the containerd store on a fresh install without the key); `docker info`
# names a containerd snapshotter's driver type io.containerd.snapshotter.v1 (its DriverStatus). Images and
# containers of the other store stay on disk but are hidden once the store is switched, the running server included.
IMAGE_STORE_FEATURE = "containerd-snapshotter"
CONTAINERD_DRIVER_TYPE = "io.containerd.snapshotter.v1"


def docker_image_store(driver_status: str | Iterable[Any] | None) -> str:
    """containerd or classic, from `docker info`'s DriverStatus ([[key, value], ...], or its JSON as `docker info
    --format '{{json .DriverStatus}}'` prints it); "" when it is not known (no running engine)."""
    if isinstance(driver_status, str):
        try:
            driver_status = json.loads(driver_status)
        except ValueError:
            return ""
    if not isinstance(driver_status, (list, tuple)):
        return ""
    pairs = [tuple(item) for item in driver_status if isinstance(item, (list, tuple)) and len(item) == 2]
    return "containerd" if ("driver-type", CONTAINERD_DRIVER_TYPE) in pairs else "classic"


def daemon_image_store_check(
    wanted: Any, store: str, variable: str = "container_runtime_daemon_extra"
) -> dict[str, Any]:
    """The check record `docker_image_store`: fail when the daemon.json the role would write sets
    features.containerd-snapshotter against the image store the running engine uses (`store`, docker_image_store).
    The key acts only when dockerd starts (a reload does not switch the store), so the next restart or reboot would
    hide every image and container of the store in use. Without a running engine (`store` ""), or without the key,
    the engine keeps or chooses its own store."""
    features = dict(wanted or {}).get("features") or {}
    fact = "docker info (DriverStatus)"
    if IMAGE_STORE_FEATURE not in features:
        return check("docker_image_store", PASS, fact, store or "no running engine", "",
                     f"daemon.json leaves the image store to the engine ({store or 'none running yet'})")  # fmt: skip
    flag = features[IMAGE_STORE_FEATURE]
    wants = "containerd" if flag is True or str(flag).lower() == "true" else "classic"
    expected = f"the {wants} image store (features.{IMAGE_STORE_FEATURE}: {str(flag).lower()})"
    if not store:
        return check("docker_image_store", PENDING, fact, "no running engine", expected,
                     f"Docker starts on {expected}")  # fmt: skip
    if store == wants:
        return check("docker_image_store", PASS, fact, f"the {store} image store", expected,
                     f"daemon.json's features.{IMAGE_STORE_FEATURE} matches the store the engine uses")  # fmt: skip
    return check(
        "docker_image_store",
        FAIL,
        fact,
        f"the {store} image store",
        expected,
        f"{variable} sets features.{IMAGE_STORE_FEATURE}: {str(flag).lower()}, but the running engine keeps its "
        f"images in the {store} image store: dockerd switches stores when it next starts (a reload does not), and "
        f"then every image and container of the {store} store is hidden, the running server included. Nothing was "
        "changed",
        f"remove features.{IMAGE_STORE_FEATURE} from {variable} (the host keeps its store); to move the host to the "
        f"{wants} store, do it by hand: `docker save` the images you need, set the key in /etc/docker/daemon.json, "
        "restart Docker, `docker load` them, then run the host phase again",
    )


def registry_pull_needed(image: Any, repo: str, pinned_digest: str = "", store: str = "") -> dict[str, Any]:
    """Whether the image role's registry source pulls: {needed, digests, why}. `image` is the `docker image inspect`
    of the reference it wants (repo@digest when pinned, else the name; {} or None when absent), `store` the engine's
    image store (docker_image_store).

    The classic store gives an image a repository digest only when it was pulled or pushed: an image of this name
    without one was built or loaded here, and is pulled. The containerd store names every tag with its own manifest
    digest, pulled or not (moby, daemon/containerd/image_inspect.go): there the digests prove nothing, and an image
    that no pinned digest names is pulled again (docker pull downloads nothing when the registry's is the same)."""
    image = dict(image or {})
    digests = [d for d in image.get("RepoDigests") or [] if str(d).startswith(f"{repo}@sha256:")]
    if not image:
        return {"needed": True, "digests": [], "why": "not on the host"}
    if store == "containerd" and not pinned_digest:
        return {
            "needed": True,
            "digests": digests,
            "why": "the containerd image store gives every tag a digest, pulled or not: pulled again, unchanged "
            "when the registry's is the same (pin bom.vllm_image.digest to skip the pull)",
        }
    if not digests:
        return {"needed": True, "digests": [], "why": f"on the host without a digest of {repo}: built or loaded here"}
    return {"needed": False, "digests": digests, "why": "pulled before"}
