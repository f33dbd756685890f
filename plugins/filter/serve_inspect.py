"""Filters over `docker inspect` for the serve phase: the serving image's facts, how a running container differs
from the rendered launch, and which other containers hold the GPUs or the serving port.

Many servers were set up by hand first (docs/field.md#servers-in-the-field: the article's `docker run`), so the
container the serve phase finds may carry no `io.a800-vllm.config-hash` label. `serve_launch_differences` compares
it with the rendered launch (`__serve_spec`, roles/serve/vars/main.yml) over every field the launch renders, and the
serve role replaces it only when the list is not empty. The result is text a person reads: values of variables or
flags whose name has a word ending in KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL(S) or AUTH (VLLM_API_KEY, HF_TOKEN,
--api-key) are never in it, not even inside a shell string.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.cuda_requirement import env_value

# A name is secret-looking when one of its words (split at - and _) is, or ends with, one of these: VLLM_API_KEY,
# HF_TOKEN, AWS_SECRET_ACCESS_KEY, --api-key, --hf-token; not --max-num-batched-tokens or --tokenizer.
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "AUTH")
HIDDEN = "<hidden>"
# Docker's default /dev/shm of a container with its own IPC namespace (64 MiB).
DEFAULT_SHM_BYTES = 64 * 1024**2
# NVIDIA_VISIBLE_DEVICES values that give a container no GPU (the toolkit's *Specialized Configurations with Docker*:
# void, empty or unset behave as runc; none exposes the driver but no GPU).
NO_GPU_VALUES = ("", "void", "none")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)i?b?\s*$", re.IGNORECASE)


def _secret(name: str) -> bool:
    return any(word.endswith(SECRET_WORDS) for word in re.split(r"[^A-Z0-9]+", name.upper()) if word)


def _env_dict(items: Iterable[str] | Mapping[str, Any] | None) -> dict[str, str]:
    if isinstance(items, Mapping):
        return {str(k): "" if v is None else str(v) for k, v in items.items()}
    out: dict[str, str] = {}
    for item in items or []:
        key, _, value = str(item).partition("=")
        out[key] = value
    return out


def _show(name: str, value: str) -> str:
    return f"{name}={HIDDEN}" if _secret(name) else f"{name}={value}"


def _short_id(image_id: str | None) -> str:
    return (image_id or "").removeprefix("sha256:")[:12] or "unknown"


# A secret-looking name inside a shell string (`sh -c "vllm serve --api-key sk-..."`, `HF_TOKEN=... vllm ...`).
_INLINE_SECRET = re.compile(
    r"((?:^|[\s;&|'\"])-{0,2}[A-Za-z0-9_-]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?|AUTH)(?:=|\s+))"
    r"(\"[^\"]*\"|'[^']*'|[^\s;&|'\"]+)",
    re.IGNORECASE,
)


def _redacted(argv: list[str]) -> list[str]:
    """An argument vector with the values of secret-looking flags and variables replaced by <hidden>."""
    out = []
    for i, token in enumerate(argv):
        name, eq, _ = token.partition("=")
        if i and _is_flag(argv[i - 1]) and "=" not in argv[i - 1] and _secret(argv[i - 1]) and not _is_flag(token):
            out.append(HIDDEN)
        elif eq and _secret(name) and not re.search(r"\s", token):  # NAME=value, not a shell string
            out.append(f"{name}={HIDDEN}")
        else:
            out.append(_INLINE_SECRET.sub(lambda m: m.group(1) + HIDDEN, token))
    return out


def _argv_text(argv: list[str], limit: int = 90) -> str:
    text = shlex.join(_redacted(argv)) if argv else "(none)"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def size_bytes(text: Any) -> int | None:
    """Docker's size notation (`--shm-size 32g`: binary units, as the engine reads them) in bytes."""
    if isinstance(text, int):
        return text
    match = _SIZE.match(str(text or ""))
    if not match:
        return None
    power = "bkmgtp".index((match.group(2) or "b").lower())
    return int(float(match.group(1)) * 1024**power)


def _gib(size: int | None) -> str:
    if size is None:
        return "unknown"
    return f"{size / 1024**3:g} GiB" if size >= 1024**3 else f"{size / 1024**2:g} MiB"


def find_image(images: Iterable[Mapping[str, Any]] | None, ref: str | None) -> dict[str, Any]:
    """The inspection (docker image inspect / docker_image_info) of the image a reference names: by ID, by
    repo@digest or by tag; {} when none of them is it."""
    if not ref:
        return {}
    for image in images or []:
        if ref == image.get("Id") or ref in (image.get("RepoDigests") or []) or ref in (image.get("RepoTags") or []):
            return dict(image)
    return {}


def serve_image_facts(images: Iterable[Mapping[str, Any]] | None, ref: str | None) -> dict[str, Any]:
    """What the launch rules need to know of the serving image: its ID, a name a person recognises, and its
    NVIDIA_REQUIRE_CUDA (None when the image does not declare one); inspected false when it is not on the host."""
    image = find_image(images, ref)
    tags = image.get("RepoTags") or []
    name = tags[0] if tags else (ref or "")
    label = f"{name} ({_short_id(image.get('Id'))})" if image and name != image.get("Id") else (ref or "")
    return {
        "ref": ref or "",
        "id": image.get("Id", ""),
        "name": label,
        "inspected": bool(image),
        "require_cuda": env_value((image.get("Config") or {}).get("Env"), "NVIDIA_REQUIRE_CUDA") if image else None,
    }


# --- the fields of a launch, normalised so that equal launches compare equal ------------------------------------


def _json_canonical(value: str) -> str:
    if value[:1] in "{[":
        try:
            return json.dumps(json.loads(value), sort_keys=True, separators=(",", ":"))
        except ValueError:
            return value
    return value


def _is_flag(token: str) -> bool:
    return (token.startswith("--") and len(token) > 2) or bool(re.match(r"^-[A-Za-z]", token))


def argv_options(argv: Iterable[Any]) -> tuple[list[str], dict[str, tuple[str, ...]]]:
    """`vllm serve` arguments as argparse reads them: the positionals, and each flag with its values (`--a-b x`,
    `--a_b x` and `--a-b=x` alike; JSON values canonical, so spacing and key order do not count; a repeated flag:
    the last one)."""
    tokens = [str(t) for t in argv or []]
    positional: list[str] = []
    options: dict[str, tuple[str, ...]] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not _is_flag(token):
            positional.append(token)
            continue
        name, eq, value = token.partition("=")
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        values = [value] if eq else []
        if not eq:
            while i < len(tokens) and not _is_flag(tokens[i]):
                values.append(tokens[i])
                i += 1
        options[name] = tuple(_json_canonical(v) for v in values)
    return positional, options


def _flag_text(name: str, values: tuple[str, ...]) -> str:
    if not values:
        return name
    return f"{name} {HIDDEN}" if _secret(name) else shlex.join([name, *values])


def gpu_selection(container: Mapping[str, Any]) -> str:
    """How a container gets GPUs, as text ("all", "2", "device=0,1", "nvidia runtime, NVIDIA_VISIBLE_DEVICES=all",
    "devices /dev/nvidia0"); "" when it gets none."""
    host = container.get("HostConfig") or {}
    for request in host.get("DeviceRequests") or []:
        caps = {c for group in request.get("Capabilities") or [] for c in group or []}
        ids = [str(i) for i in request.get("DeviceIDs") or []]
        if request.get("Driver") == "cdi" and any(i.startswith("nvidia.com/gpu") for i in ids):
            return "cdi " + ",".join(ids)
        if "gpu" in caps or request.get("Driver") == "nvidia":
            if ids:
                return "device=" + ",".join(ids)
            count = int(request.get("Count") or 0)
            if count:
                return "all" if count < 0 else str(count)
    visible = env_value((container.get("Config") or {}).get("Env"), "NVIDIA_VISIBLE_DEVICES")
    if host.get("Runtime") == "nvidia" and (visible or "").strip().lower() not in NO_GPU_VALUES:
        return f"nvidia runtime, NVIDIA_VISIBLE_DEVICES={visible}"
    devices = [d.get("PathOnHost", "") for d in host.get("Devices") or []]
    gpus = [d for d in devices if re.fullmatch(r"/dev/nvidia\d+", d)]
    return "devices " + ",".join(gpus) if gpus else ""


def _spec_gpus(spec: Mapping[str, Any]) -> str:
    gpus = str(spec.get("gpus", "all"))
    return "all" if gpus in ("all", "-1") else str(int(gpus))


def port_bindings(container: Mapping[str, Any]) -> list[str]:
    """Published ports as `address:host_port->container_port/proto` (an empty address is every interface)."""
    out = []
    for key, binds in sorted(((container.get("HostConfig") or {}).get("PortBindings") or {}).items()):
        port, _, proto = key.partition("/")
        for bind in binds or []:
            out.append(f"{bind.get('HostIp') or '0.0.0.0'}:{bind.get('HostPort') or ''}->{port}/{proto or 'tcp'}")
    return sorted(set(out))


def _spec_ports(spec: Mapping[str, Any]) -> list[str]:
    """`published_ports` of the launch (`address:host_port:container_port[/proto]`, as docker_container takes them)."""
    out = []
    for item in spec.get("published_ports") or []:
        parts = str(item).rsplit(":", 2)
        address, host_port, target = ["0.0.0.0", ""][: 3 - len(parts)] + parts if len(parts) < 3 else parts
        port, _, proto = target.partition("/")
        out.append(f"{address.strip('[]') or '0.0.0.0'}:{host_port}->{port}/{proto or 'tcp'}")
    return sorted(set(out))


def _ipc(mode: str | None) -> str:
    mode = mode or "private"
    return "private" if mode in ("private", "shareable") else mode  # both: an IPC namespace of its own


def _binds(container: Mapping[str, Any]) -> dict[str, tuple[str, bool]]:
    return {
        m.get("Destination", ""): (m.get("Source", ""), not m.get("RW", True))
        for m in container.get("Mounts") or []
        if m.get("Type") == "bind"
    }


def _spec_binds(spec: Mapping[str, Any]) -> dict[str, tuple[str, bool]]:
    out = {}
    for item in spec.get("volumes") or []:
        source, _, rest = str(item).partition(":")
        target, _, opts = rest.partition(":")
        out[target] = (source, "ro" in opts.split(","))
    return out


def _ulimits(container: Mapping[str, Any]) -> dict[str, str]:
    return {
        u.get("Name", ""): f"{u.get('Soft')}:{u.get('Hard')}"
        for u in (container.get("HostConfig") or {}).get("Ulimits") or []
    }


def _spec_ulimits(spec: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for item in spec.get("ulimits") or []:
        name, _, limits = str(item).partition(":")
        soft, _, hard = limits.partition(":")
        out[name] = f"{int(soft)}:{int(hard or soft)}"
    return out


def _limits_text(limits: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(limits.items())) or "none"


# --- the comparison ---------------------------------------------------------------------------------------------


def _image_differences(container: Mapping[str, Any], spec: Mapping[str, Any], images: list) -> list[str]:
    ref = str(spec.get("image") or "")
    wanted = find_image(images, ref)
    wanted_id = wanted.get("Id") or (ref if ref.startswith("sha256:") else "")
    running_id = container.get("Image", "")
    running_name = (container.get("Config") or {}).get("Image", "") or running_id
    if (wanted_id and running_id == wanted_id) or (not wanted_id and ref and running_name == ref):
        return []
    wanted_name = ((wanted.get("RepoTags") or [ref])[0] if wanted else ref) or "(none)"
    return [
        f"image: runs {running_name} ({_short_id(running_id)}), the launch renders {wanted_name}"
        + (f" ({_short_id(wanted_id)})" if wanted_id and wanted_name != wanted_id else "")
    ]


def _split_serve_argv(argv: list[str], entrypoint: list[str]) -> tuple[list[str], list[str]]:
    """A container's whole argument vector (Config.Entrypoint + Config.Cmd) as (what runs `vllm serve`, the
    arguments of `vllm serve`): split after the launch's entrypoint when it starts with it (`docker run --entrypoint`
    takes one word, so a launch run by hand has the rest of it in Cmd), else after `vllm serve`."""
    if entrypoint and argv[: len(entrypoint)] == entrypoint:
        return entrypoint, argv[len(entrypoint) :]
    for i in range(len(argv) - 1):
        if argv[i].rsplit("/", 1)[-1] == "vllm" and argv[i + 1] == "serve":
            return argv[: i + 2], argv[i + 2 :]
    return argv, []


def _argument_differences(container: Mapping[str, Any], spec: Mapping[str, Any]) -> list[str]:
    config = container.get("Config") or {}
    want_ep = [str(a) for a in spec.get("entrypoint") or []]
    argv = [str(a) for a in (config.get("Entrypoint") or []) + (config.get("Cmd") or [])]
    have_ep, have_args = _split_serve_argv(argv, want_ep)
    out = []
    if have_ep != want_ep:
        out.append(f"entrypoint: {_argv_text(have_ep)}, the launch renders {_argv_text(want_ep)}")
    have_pos, have = argv_options(have_args)
    want_pos, want = argv_options(spec.get("command") or [])
    if have_pos != want_pos:
        out.append(f"arguments: model {_argv_text(have_pos)}, the launch renders {_argv_text(want_pos)}")
    for flag in sorted(set(have) | set(want)):
        if flag not in have:
            out.append(f"arguments: {_flag_text(flag, want[flag])} missing (the launch renders it)")
        elif flag not in want:
            out.append(f"arguments: {_flag_text(flag, have[flag])} set by hand, not in the launch")
        elif have[flag] != want[flag]:
            if _secret(flag):
                out.append(f"arguments: {flag} differs from the launch (values hidden)")
            else:
                out.append(
                    f"arguments: {_flag_text(flag, have[flag])}, the launch renders {_flag_text(flag, want[flag])}"
                )
    return out


def _env_differences(container: Mapping[str, Any], spec: Mapping[str, Any], image: Mapping[str, Any]) -> list[str]:
    have = _env_dict((container.get("Config") or {}).get("Env"))
    want = _env_dict(spec.get("env") or {})
    from_image = _env_dict((image.get("Config") or {}).get("Env"))
    out = []
    for name in sorted(set(have) | set(want)):
        if name in want:
            if name not in have:
                out.append(f"environment: {name} unset, the launch sets {_show(name, want[name])}")
            elif have[name] != want[name]:
                out.append(
                    f"environment: {name} differs from the launch (values hidden)"
                    if _secret(name)
                    else f"environment: {name}={have[name]}, the launch sets {name}={want[name]}"
                )
        elif from_image.get(name) != have[name]:  # not the image's own value: set when the container was created
            out.append(f"environment: {_show(name, have[name])} set by hand, not in the launch")
    return out


def _ipc_differences(host: Mapping[str, Any], spec: Mapping[str, Any]) -> list[str]:
    out = []
    have, want = _ipc(host.get("IpcMode")), _ipc(spec.get("ipc_mode"))
    if have != want:
        out.append(f"ipc mode: {have}, the launch renders {want}" + (" (--ipc=host)" if want == "host" else ""))
    if want != "host":  # with the host's IPC namespace the container's own /dev/shm size is not used
        have_shm = host.get("ShmSize") or DEFAULT_SHM_BYTES
        want_shm = size_bytes(spec.get("shm_size")) if spec.get("shm_size") else DEFAULT_SHM_BYTES
        if have_shm != want_shm:
            rendered = spec.get("shm_size") or "the default"
            out.append(f"shm size: {_gib(have_shm)}, the launch renders {rendered} ({_gib(want_shm)})")
    return out


def _mount_differences(container: Mapping[str, Any], spec: Mapping[str, Any]) -> list[str]:
    out = []
    have_binds, want_binds = _binds(container), _spec_binds(spec)
    for target in sorted(set(have_binds) | set(want_binds)):
        have, want = have_binds.get(target), want_binds.get(target)
        if have == want:
            continue
        if have is None:
            mode = " read-only" if want[1] else ""
            out.append(f"mounts: {target} not mounted, the launch mounts {want[0]} there{mode}")
        elif want is None:
            out.append(f"mounts: {have[0]} on {target} by hand, not in the launch")
        elif have[0] != want[0]:
            out.append(f"mounts: {target} from {have[0]}, the launch mounts {want[0]}")
        else:
            modes = {True: "read-only", False: "read-write"}
            out.append(f"mounts: {target} {modes[have[1]]}, the launch mounts it {modes[want[1]]}")
    return out


def serve_launch_differences(
    container: Mapping[str, Any], spec: Mapping[str, Any], images: Iterable[Mapping[str, Any]] | None = None
) -> list[str]:
    """How a running container (its `docker inspect`) differs from the rendered launch `spec`, one line per
    difference, each starting with the field: image, entrypoint, arguments, environment, gpus, published ports,
    ipc mode, shm size, mounts, ulimits, restart policy, stop timeout (every field of the spec that its config hash
    covers, except the name). [] when they are the same launch.

    `images`: inspections of the launch's image (for its ID) and of the container's image (whose own Config.Env the
    container inherits: those variables are not differences). Arguments compare as argparse reads them; an empty
    published address equals 0.0.0.0; the IPC modes private and shareable are one (a namespace of its own), and the
    shm size counts only without the host's IPC namespace."""
    images = list(images or [])
    host = container.get("HostConfig") or {}
    out = _image_differences(container, spec, images)
    out += _argument_differences(container, spec)
    # the variables the container inherits come from its own image (the launch's, when that one is gone)
    base = find_image(images, container.get("Image")) or find_image(images, spec.get("image"))
    out += _env_differences(container, spec, base)
    have_gpus, want_gpus = gpu_selection(container), _spec_gpus(spec)
    if have_gpus != want_gpus:
        out.append(f"gpus: {have_gpus or 'none'}, the launch renders --gpus {want_gpus}")
    have_ports, want_ports = port_bindings(container), _spec_ports(spec)
    if have_ports != want_ports:
        have_text, want_text = ", ".join(have_ports) or "none", ", ".join(want_ports) or "none"
        out.append(f"published ports: {have_text}, the launch publishes {want_text}")
    out += _ipc_differences(host, spec)
    out += _mount_differences(container, spec)
    have_limits, want_limits = _ulimits(container), _spec_ulimits(spec)
    if have_limits != want_limits:
        out.append(f"ulimits: {_limits_text(have_limits)}, the launch sets {_limits_text(want_limits)}")
    have_restart = (host.get("RestartPolicy") or {}).get("Name") or "no"
    want_restart = str(spec.get("restart_policy") or "no")
    if have_restart != want_restart:
        out.append(f"restart policy: {have_restart}, the launch renders {want_restart}")
    if spec.get("stop_timeout") not in (None, ""):  # absent from Config: Docker's default, 10 s
        have_stop = int((container.get("Config") or {}).get("StopTimeout") or 10)
        if have_stop != int(spec["stop_timeout"]):
            out.append(f"stop timeout: {have_stop} s, the launch renders --stop-timeout {int(spec['stop_timeout'])}")
    return out


CONFIG_HASH_LABEL = "io.a800-vllm.config-hash"


def serve_restart_decision(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The serve phase's restart decision, from one mapping:

    - `current`: what `community.docker.docker_container_info` returned for the server's name ({exists, container});
    - `spec`: the rendered launch (`__serve_spec`), whose label io.a800-vllm.config-hash is the launch's hash;
    - `images`: inspections of the serving image and of the running container's image.

    Returns {running, running_hash, by_hand, differences, adopted, needed, why}. A labelled container restarts when
    its hash differs or it does not run. A container without the label was started by hand (the article's `docker
    run`): compared with the launch field by field, it is adopted as it is when it runs and nothing differs, and
    replaced once otherwise (the replacement carries the label). `why` is the sentence the run prints."""
    current = inputs.get("current") or {}
    spec = inputs.get("spec") or {}
    exists = bool(current.get("exists"))
    container = (current.get("container") or {}) if exists else {}
    want_hash = str((spec.get("labels") or {}).get(CONFIG_HASH_LABEL) or "")
    labels = (container.get("Config") or {}).get("Labels") or {}
    running_hash = str(labels.get(CONFIG_HASH_LABEL) or "")
    running = exists and bool((container.get("State") or {}).get("Running"))
    by_hand = exists and not running_hash
    differences = serve_launch_differences(container, spec, inputs.get("images")) if by_hand else []
    fields = ", ".join(dict.fromkeys(d.split(":", 1)[0] for d in differences))
    adopted = by_hand and running and not differences
    needed = not running or (running_hash != want_hash and not adopted)
    if not exists:
        why = "no container yet"
    elif by_hand and not running:
        why = f"started by hand (no label {CONFIG_HASH_LABEL}) and not running" + (
            f"; it differs from the rendered launch in: {fields}" if fields else ""
        )
    elif by_hand:
        why = (
            f"started by hand; differs from the rendered launch in: {fields}"
            f" - replaced once by the rendered launch, which carries the label {CONFIG_HASH_LABEL}"
        )
    elif running_hash != want_hash:
        why = f"the launch changed ({running_hash} -> {want_hash})"
    else:
        why = "the container is not running"
    return {
        "running": running,
        "running_hash": running_hash,
        "by_hand": by_hand,
        "differences": differences,
        "adopted": adopted,
        "needed": needed,
        "why": why,
    }


def serve_other_containers(
    containers: Iterable[Mapping[str, Any]] | None, own_name: str, port: Any
) -> list[dict[str, Any]]:
    """The running containers other than `own_name` that hold GPUs or publish `port` on the host, each as
    {name, gpus (how it gets them, "" when it has none), ports (its bindings of that port)}."""
    out = []
    for container in containers or []:
        name = str(container.get("Name", "")).lstrip("/")
        state = container.get("State") or {}
        if name == own_name or not (state.get("Running") or state.get("Restarting")):
            continue
        gpus = gpu_selection(container)
        ports = [p for p in port_bindings(container) if p.split("->")[0].rsplit(":", 1)[-1] == str(port)]
        if gpus or ports:
            out.append({"name": name, "gpus": gpus, "ports": ports})
    return out


def serve_published_health(inspect_text: Any, serve_port: Any) -> dict[str, Any]:
    """Where the running server answers /health, from `docker inspect --format` of `{"running": .State.Running,
    "ports": .NetworkSettings.Ports}` (what the host phase reads, no environment): {serving, url, port, detail}.

    The port the container publishes now, not serve_port: a changed serve_port is applied by the serve phase, so
    until then the running server still answers on the port it was started with. Of several published TCP ports
    the one equal to serve_port wins, else the lowest container port; an address bound to every interface (or
    none: the host network) is reached on 127.0.0.1."""
    text = str(inspect_text or "").strip()
    try:
        found = json.loads(text.splitlines()[0]) if text else {}
    except ValueError:
        found = {}
    if not isinstance(found, Mapping) or found.get("running") is not True:
        return {"serving": False, "url": "", "port": None, "detail": "not running"}
    bindings = []
    for key, binds in ((found.get("ports") or {}) if isinstance(found.get("ports"), Mapping) else {}).items():
        port, _, proto = str(key).partition("/")
        if (proto or "tcp") != "tcp" or not port.isdigit():
            continue
        for bind in binds or []:
            host_port = str((bind or {}).get("HostPort") or "")
            if host_port.isdigit():
                bindings.append((int(port), str(bind.get("HostIp") or ""), int(host_port)))
    if not bindings:  # the host network (or nothing published): the server's own port is the host's
        port, address, detail = int(serve_port), "", f"publishes no port; serve_port {serve_port}"
    else:
        wanted = [b for b in bindings if b[2] == int(serve_port)]
        _, address, port = sorted(wanted or bindings)[0]
        detail = f"publishes {port}" + ("" if port == int(serve_port) else f" (serve_port is {serve_port})")
    host = "127.0.0.1" if address in ("", "0.0.0.0", "::") else f"[{address}]" if ":" in address else address
    return {"serving": True, "url": f"http://{host}:{port}/health", "port": port, "detail": detail}


class FilterModule:
    def filters(self) -> dict:
        return {
            "serve_launch_differences": serve_launch_differences,
            "serve_restart_decision": serve_restart_decision,
            "serve_other_containers": serve_other_containers,
            "serve_image_facts": serve_image_facts,
            "serve_published_health": serve_published_health,
        }
