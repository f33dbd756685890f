"""Filters: settings judged before anything runs, without the host (the preflight's first step, in seconds).

`a800_settings_checks` checks variables against the options of an argument spec (a role's `meta/argument_specs.yml`
entry, read by Ansible's own validator, ArgumentSpecValidator: the one that validates a role's variables when the
role runs) and adds the ranges a spec cannot write (`RANGES`). Only the variables that are set are judged; each
problem is a failed check record named after the variable, whose fix names the variable and what to set:

    a800_host_batch: 0 hosts at a time; Ansible's serial runs every host at once for 0 (docs/field.md#rolling-batches)

`serve_container_checks` judges the container values of the serve role (the /dev/shm size, the IPC choice, the GPUs,
the ulimits, the port) as Docker and community.docker.docker_container read them; the serve role calls it before
its launch is rendered and the preflight calls it through the same task file (roles/serve/tasks/settings.yml).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.text.formatters import human_to_bytes
from ansible.module_utils.errors import UnsupportedError
from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, check

SPEC_KEYS = ("type", "elements", "choices", "no_log", "options")
_ARGUMENT = re.compile(r"argument '(?P<name>[^']+)'")
_CONVERT = re.compile(r"unable to convert to (?P<type>\w+)")
TYPE_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
              "dict": "a mapping", "list": "a list", "path": "a path", "raw": "a value"}  # fmt: skip
_PERCENT = re.compile(r"^(\d+)%$")
_ULIMIT = re.compile(r"^[a-z]+:-?\d+(:-?\d+)?$")


def _batch_problem(value: Any) -> str | None:
    """Ansible's serial (a800_host_batch): a positive count, a percentage 1%..100%, or a list of them. Ansible runs
    every host at once for a count of 0 or less (executor/playbook_executor.py, _get_serialized_batches)."""
    items = value if isinstance(value, list) else [value]
    if not items:
        return "an empty list: Ansible runs every host at once"
    for item in items:
        if isinstance(item, bool):
            return f"{item!r} is not a count"
        text = str(item).strip()
        percent = _PERCENT.match(text)
        if percent:
            if not 1 <= int(percent.group(1)) <= 100:
                return f"{text} is outside 1%..100%"
        elif re.fullmatch(r"-?\d+", text):
            if int(text) < 1:
                return f"{text} hosts at a time: Ansible's serial runs every host at once for a count below 1"
        else:
            return f"{text!r} is neither a count nor a percentage"
    return None


def _at_least(minimum: int) -> Any:
    def problem(value: Any) -> str | None:
        try:
            number = int(str(value).strip())
        except ValueError:
            return None  # the spec's type names it
        return None if number >= minimum else f"{number} is below {minimum}"

    return problem


# What a spec cannot write: the range of a value of the right type, by variable name.
RANGES = {
    "a800_host_batch": (_batch_problem, "a count of at least 1, a percentage 1%..100% or a list of them"),
    "a800_host_ready_timeout_s": (_at_least(10), "at least 10 (seconds; polled every 10 s)"),
}


def a800_settings_checks(values: Mapping[str, Any], options: Mapping[str, Any], documented_in: str) -> list[dict]:
    """Failed check records for the set variables (`values`, name -> value) that do not fit `options` (an argument
    spec's options, `required` ignored: only what is set is judged) or `RANGES`; [] when all fit. `documented_in`
    (a README) is named in each fix."""
    # Plain values of what the validator reads (not the templating engine's tagged ones: they make it ~100x slower),
    # without `required` and `default`: only what is set is judged.
    kept = {name: {k: opt[k] for k in SPEC_KEYS if k in opt} for name, opt in options.items()}
    options = json.loads(json.dumps(kept))
    values = json.loads(json.dumps({name: value for name, value in values.items() if name in options}))
    # Not shown: a secret, and a mapping's value (serve_extra_env may hold a token even when it is not a mapping).
    secret = {name for name, opt in options.items() if opt.get("no_log") or opt.get("type") == "dict"}
    result = ArgumentSpecValidator(options).validate(dict(values))
    records: dict[str, dict] = {}
    for error in result.errors:
        if isinstance(error, UnsupportedError):
            continue
        argument = _ARGUMENT.search(error.msg)
        named = [argument["name"]] if argument else [n for n in values if re.search(rf"\b{re.escape(n)}\b", error.msg)]
        name = named[0] if named else ""
        if name not in values or name in records:
            continue
        convert = _CONVERT.search(error.msg)
        want = TYPE_WORDS.get(convert["type"], convert["type"]) if convert else "see detail"
        shown = "<hidden>" if name in secret else values[name]
        detail = f"{shown!r} is not {want}" if convert else error.msg
        if "choices" in options[name] and not convert:
            want = "one of " + ", ".join(str(c) for c in options[name]["choices"])
            detail = f"{shown!r} is not {want}"
        records[name] = check(name, FAIL, name, shown, want, detail, f"set {name} to {want} ({documented_in})")
    for name, (problem, want) in RANGES.items():
        if name in values and name not in records:
            found = problem(values[name])
            if found:
                records[name] = check(
                    name, FAIL, name, values[name], want, found, f"set {name} to {want} ({documented_in})"
                )
    return [records[name] for name in sorted(records)]


def shm_size_problem(value: Any) -> str | None:
    """Why docker_container would refuse serve_shm_size (its `shm_size`: `<number>[<unit>]`, read with Ansible's
    human_to_bytes, the same function the serve role's ipc choice uses; docs/field.md#the-containers-devshm-size)."""
    try:
        size = human_to_bytes(str(value).strip())
    except (ValueError, TypeError) as error:
        return f"{value!r} is not a size docker_container reads ({error})"
    if size <= 0:
        return f"{value!r} is not a positive size"
    return None


def _ipc_problem(value: Any) -> str | None:
    if isinstance(value, bool) or str(value).strip().lower() in ("auto", "true", "false", "yes", "no"):
        return None
    return f"{value!r} is none of true, false, auto"


def _gpus_problem(value: Any) -> str | None:
    text = str(value).strip()
    if text == "all" or (re.fullmatch(r"\d+", text) and int(text) >= 1):
        return None
    return f"{value!r} is neither all nor a positive count of GPUs"


def _ulimits_problem(value: Any) -> str | None:
    items = value.split(",") if isinstance(value, str) else value or []  # a string is a list, as the spec reads it
    bad = [str(item) for item in items if not _ULIMIT.match(str(item).strip())]
    return f"{', '.join(bad)}: not name:soft[:hard]" if bad else None


def _port_problem(value: Any) -> str | None:
    text = str(value).strip()
    if re.fullmatch(r"\d+", text) and 1 <= int(text) <= 65535:
        return None
    return f"{value!r} is not a port (1..65535)"


CONTAINER_RULES = {
    "serve_shm_size": (shm_size_problem, "a size such as 32g (docker_container's shm_size: <number>[B|K|M|G|T|P])"),
    "serve_ipc_host": (_ipc_problem, "true, false or auto"),
    "serve_gpus": (_gpus_problem, "all or a positive count"),
    "serve_ulimits": (_ulimits_problem, "a list of name:soft:hard (memlock:-1:-1)"),
    "serve_port": (_port_problem, "a port 1..65535"),
}


def serve_container_checks(values: Mapping[str, Any]) -> list[dict]:
    """Failed check records for the serve role's container values (`values`: serve_shm_size, serve_ipc_host,
    serve_gpus, serve_ulimits, serve_port) that Docker or docker_container would refuse; [] when all fit. A private
    /dev/shm is used only when the host's is smaller, but a wrong size is refused whatever the host has."""
    records = []
    for name, (problem, want) in CONTAINER_RULES.items():
        found = problem(values[name]) if name in values else None
        if found:
            records.append(check(name, FAIL, name, values[name], want, found, f"set {name} to {want}"))
    return records


def serve_settings_checks(values: Mapping[str, Any], options: Mapping[str, Any]) -> list[dict]:
    """The serve role's settings: its argument spec's types and choices, then the container values (one record per
    variable: a value of the wrong type is not judged again as a container value)."""
    typed = a800_settings_checks(values, options, "roles/serve/README.md")
    named = {record["name"] for record in typed}
    return typed + [record for record in serve_container_checks(values) if record["name"] not in named]


class FilterModule:
    def filters(self) -> dict:
        return {
            "a800_settings_checks": a800_settings_checks,
            "serve_container_checks": serve_container_checks,
            "serve_settings_checks": serve_settings_checks,
        }
