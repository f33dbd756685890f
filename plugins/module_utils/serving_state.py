"""What the serve role's decision and checks read from a serving host, in one module run (plugins/modules/
serving_state.py): the serving container and the images it is compared with, what listens on the serving port, the
running containers, the API key file's stat and the releases rolled back there. Each read had been its own task (its
own Python on the host: ~0.3 s and a quarter of a CPU-second each, seven per host per serve phase); the shapes are
those of the modules they replace, so the checks and the restart decision read them as before."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

Run = Callable[[Sequence[str]], tuple[int, str, str]]  # argv -> (rc, stdout, stderr)


class ReadError(Exception):
    """A read that must work did not (no Docker engine answering, no ss): its command and its error."""


def _json_list(text: str) -> list[dict[str, Any]]:
    try:
        found = json.loads(text or "[]")
    except ValueError:
        return []
    return [item for item in found if isinstance(item, dict)] if isinstance(found, list) else []


def container_info(run: Run, name: str) -> dict[str, Any]:
    """{exists, container} as community.docker.docker_container_info returns them (the Engine API's inspect)."""
    rc, out, err = run(["docker", "container", "inspect", name])
    found = _json_list(out)
    if rc == 0 and found:
        return {"exists": True, "container": found[0]}
    if "no such container" in err.lower() or "no such object" in err.lower():
        return {"exists": False, "container": None}
    raise ReadError(f"docker container inspect {name} failed (rc {rc}): {err.strip()}")


def image_info(run: Run, names: Sequence[str]) -> list[dict[str, Any]]:
    """The inspect of each image of `names` that is on the host, as community.docker.docker_image_info returns them
    (a missing one is left out)."""
    names = list(dict.fromkeys(n for n in names if n))
    if not names:
        return []
    rc, out, err = run(["docker", "image", "inspect", *names])
    found = _json_list(out)
    if rc != 0 and not found and "no such image" not in err.lower():
        raise ReadError(f"docker image inspect failed (rc {rc}): {err.strip()}")
    return found


def file_stat(path: str) -> dict[str, Any]:
    """{exists, mode ('0600'), checksum (sha1)} as ansible.builtin.stat returns them with checksum_algorithm sha1."""
    try:
        st = os.stat(path)
        with open(path, "rb") as handle:
            digest = hashlib.sha1(handle.read()).hexdigest()  # the stat module's checksum (sha1)
    except FileNotFoundError:
        return {"exists": False}
    return {"exists": True, "mode": f"{st.st_mode & 0o7777:04o}", "checksum": digest}


def file_content(path: str) -> dict[str, Any]:
    """{content (base64)} as ansible.builtin.slurp returns it, or {} without the file."""
    try:
        with open(path, "rb") as handle:
            return {"content": base64.b64encode(handle.read()).decode()}
    except FileNotFoundError:
        return {}


def serving_state(
    run: Run,
    container: str,
    images: Sequence[str],
    port: int,
    key_path: str,
    rejected_path: str,
    last_good_path: str | None = None,
) -> dict[str, Any]:
    """Every read, in the order the tasks ran them: the container first (its image is inspected with the serving
    image), then the port, the running containers, the key file and the rejected releases; with ``last_good_path``,
    the last known-good launch's stat too (``last_good``, as ``key``), so that a launch kept already is not written
    again."""
    current = container_info(run, container)
    own_image = [current["container"].get("Image", "")] if current["exists"] else []
    state: dict[str, Any] = {"current": current, "images": image_info(run, [*images, *own_image])}
    rc, out, err = run(["ss", "-H", "-ltn", f"sport = :{port}"])
    if rc != 0:
        raise ReadError(f"ss -H -ltn 'sport = :{port}' failed (rc {rc}): {err.strip()}")
    state["port_listener"] = out.strip()
    rc, out, err = run(["docker", "ps", "--quiet", "--no-trunc"])
    if rc != 0:
        raise ReadError(f"docker ps failed (rc {rc}): {err.strip()}")
    running = out.split()
    state["running"] = running
    # a container that exits meanwhile is left out by docker (rc 1, the others still listed): kept as read
    state["running_inspect"] = run(["docker", "container", "inspect", *running])[1] if running else ""
    state["key"] = file_stat(key_path)
    state["rejected"] = file_content(rejected_path)
    if last_good_path:
        state["last_good"] = file_stat(last_good_path)
    return state
