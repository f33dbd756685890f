"""Filters: render the `vllm serve` launch from the model profile: its argument list, the equivalent `docker run`
line (for --diff and the launch file), and the engine's ready timeout sized from the weights.

Every key of model_profile.launch becomes a flag (`kv_cache_dtype: bfloat16` -> `--kv-cache-dtype bfloat16`; true
-> the bare flag; a list -> the flag and its values; a mapping -> JSON). The rules that validate the launch before
anything restarts are in vllm_launch_rules.py.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# Keys of model_profile.launch that are not `vllm serve` flags.
NOT_FLAGS = ("env",)


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def json_value(value: Any) -> Any:
    """A JSON option as data: a mapping stays one, a string is parsed (ValueError when it is not JSON)."""
    if isinstance(value, str):
        return json.loads(value)
    return value


def vllm_launch_args(launch: dict, model: str, served_model_name: str, host: str, port: int, extra: Any = None) -> list:
    """The argument list of `vllm serve` (after the image's entrypoint): the model, the bind address, then every
    key of model_profile.launch as a flag in the profile's order — true → the bare flag, false/None/"" → omitted,
    mappings → compact JSON — then `extra` verbatim."""
    args = [str(model), "--host", str(host), "--port", str(int(port)), "--served-model-name", str(served_model_name)]
    for key, value in launch.items():
        if key in NOT_FLAGS or value is None or value is False or value == "":
            continue
        if value is True:
            args.append(_flag(key))
        elif isinstance(value, dict):
            args += [_flag(key), json.dumps(value, separators=(",", ":"), sort_keys=True)]
        elif isinstance(value, list):
            args += [_flag(key)] + [str(v) for v in value]
        else:
            args += [_flag(key), str(value)]
    return args + [str(a) for a in (extra or [])]


def vllm_command_line(spec: dict) -> str:
    """The launch as one `docker run` line a person can read and paste (secrets are files, never inline)."""

    def q(text: Any) -> str:
        text = str(text)
        return text if re.fullmatch(r"[\w@%+=:,./-]+", text) else "'" + text.replace("'", "'\"'\"'") + "'"

    parts = ["docker run -d", "--name", spec["name"], "--gpus", spec.get("gpus", "all")]
    parts += ["--ipc=host"] if spec.get("ipc_mode") == "host" else ["--shm-size", spec.get("shm_size", "")]
    for ulimit in spec.get("ulimits", []):  # docker_container's name:soft:hard is `docker run --ulimit name=soft:hard`
        name, _, limits = str(ulimit).partition(":")
        parts += ["--ulimit", f"{name}={limits}"]
    parts += ["--restart", spec.get("restart_policy", "no")]
    if spec.get("stop_timeout") not in (None, ""):
        parts += ["--stop-timeout", str(spec["stop_timeout"])]
    for key, value in sorted(spec.get("env", {}).items()):
        parts += ["-e", f"{key}={value}"]
    for volume in spec.get("volumes", []):
        parts += ["-v", volume]
    for port in spec.get("published_ports", []):
        parts += ["-p", port]
    for key, value in sorted(spec.get("labels", {}).items()):
        parts += ["--label", f"{key}={value}"]
    if spec.get("entrypoint"):
        parts += ["--entrypoint", spec["entrypoint"][0]]
    parts.append(spec["image"])
    parts += spec.get("entrypoint", [])[1:] + spec.get("command", [])
    return " ".join(q(p) if i else p for i, p in enumerate(parts))


def vllm_ready_timeout(weights_gb: Any, load_time: dict, margin: Any = 1.5, floor: Any = 600) -> int:
    """Seconds to give the engine (VLLM_ENGINE_READY_TIMEOUT_S): a cold load of these weights at the profile's
    measured rate plus the startup after loading (compile, KV profiling, CUDA graphs), times a margin, rounded up to
    a minute and never below vLLM's own 600 s default. With margin 1 and floor 0: the least that can work."""
    cold = float(weights_gb) / float(load_time["cold_gb_per_s"])
    need = (cold + float(load_time.get("after_load_s", 300))) * float(margin)
    return max(int(floor), math.ceil(need / 60.0) * 60)


class FilterModule:
    def filters(self) -> dict:
        return {
            "vllm_launch_args": vllm_launch_args,
            "vllm_command_line": vllm_command_line,
            "vllm_ready_timeout": vllm_ready_timeout,
        }
