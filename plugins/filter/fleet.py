"""Filters of the fleet role: the gateway's keys and limits checked, and the router's workers from the inventory.

Every error names the variable, the entry (by its id, never by its key) and the fix, so that the preflight of the
fleet role stops before nginx or the router is reloaded.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

# RFC 6750 section 2.1: a bearer token is a b64token, 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
# The same characters need no escaping inside a quoted nginx string, where the gateway's key map holds them.
KEY_RE = re.compile(r"^[A-Za-z0-9._~+/-]+=*$")
KEY_MIN_LEN = 20
# The longest key: the gateway's map_hash_bucket_size (roles/fleet/templates/a800-fleet.conf.j2) is fixed at 512
# bytes, which holds "Bearer " + 256 characters. nginx's hash needs, for every key, a bucket of at least
# sizeof(void *) + align(len + 2, sizeof(void *)) + sizeof(void *) bytes (NGX_HASH_ELT_SIZE plus the pointer that
# ends a bucket, checked in ngx_hash_init: https://github.com/nginx/nginx/blob/master/src/core/ngx_hash.c), that is
# 8 + 272 + 8 = 288 bytes for "Bearer " + 256 on a 64-bit host; 512 is a multiple of every cache line size that nginx
# aligns the bucket size to (https://nginx.org/en/docs/hash.html). A cap well under nginx's other limits too: one
# configuration parameter is at most 4096 bytes (NGX_CONF_BUFFER, src/core/ngx_conf_file.c), and the Authorization
# header line must fit a client_header_buffer_size (1k) or large_client_header_buffers buffer (8k).
KEY_MAX_LEN = 256
# The id is what the access log and the usage report show: letters, digits and . _ - (an nginx map value unquoted).
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
KEY_FIELDS = {"id", "key", "requests_per_minute", "burst", "concurrency", "description"}
LIMITS = {
    "requests_per_minute": "requests per minute (nginx limit_req rate=N r/m)",
    "burst": "requests over the rate that wait instead of getting 429 (limit_req burst)",
    "concurrency": "requests in flight at once (limit_conn)",
}


def _whole(value: Any) -> int | None:
    """A whole number >= 0 given as an int or a string of digits (-e gives strings); anything else is None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def fleet_key_errors(keys: Any, defaults: dict | None = None) -> list[str]:
    """What is wrong with fleet_gateway_keys (a list of {id, key, requests_per_minute, burst, concurrency}).

    Limits missing from an entry come from defaults (fleet_gateway_default_limits), which are checked too."""
    var = "fleet_gateway_keys"
    errors: list[str] = []
    defaults = defaults or {}
    for name in LIMITS:
        if name in defaults and (_whole(defaults[name]) is None or (_whole(defaults[name]) or 0) < 1):
            errors.append(
                f"fleet_gateway_default_limits.{name} is {defaults[name]!r}, not a whole number >= 1 of "
                f"{LIMITS[name]}; give e.g. {name}: 60"
            )
    if not isinstance(keys, list) or not keys:
        return [
            *errors,
            f"{var} is empty or not a list: a gateway without a key refuses every request. Give one entry per team "
            "({id: team-a, key: <vaulted>, requests_per_minute: 600, burst: 60, concurrency: 16}) in a vaulted "
            "group_vars file of the gateway hosts (ansible-vault encrypt)",
        ]
    # nginx's map matches strings ignoring case (https://nginx.org/en/docs/http/ngx_http_map_module.html#map:
    # "Strings are matched ignoring the case"; ngx_hash_add_key and ngx_http_map_find lower-case both sides), so keys
    # and ids are compared as nginx compares them: lower-cased.
    ids: dict[str, tuple[int, str]] = {}
    key_owner: dict[str, tuple[str, str]] = {}
    for index, entry in enumerate(keys):
        where = f"{var}[{index}]"
        if not isinstance(entry, dict):
            errors.append(f"{where} is not a mapping; give {{id: ..., key: ...}}")
            continue
        ident = entry.get("id")
        if isinstance(ident, str) and ID_RE.match(ident):
            where = f"{where} (id {ident})"
            first, first_ident = ids.get(ident.lower(), (None, ""))
            if first is not None and first_ident == ident:
                errors.append(f"{where}: the id is also entry {first}'s; every team needs its own id")
            elif first is not None:
                errors.append(
                    f"{where}: the id differs from entry {first}'s ({first_ident}) only in case, and nginx's map "
                    "matches strings ignoring case: the two teams would share each other's limits; give ids that "
                    "differ in more than case"
                )
            ids.setdefault(ident.lower(), (index, ident))
        else:
            errors.append(
                f"{where}: id {ident!r} is missing or not 1-64 letters, digits, '.', '_' or '-' starting with a letter "
                "or digit; it is what the access log and the usage report show (never the key)"
            )
        unknown = sorted(set(entry) - KEY_FIELDS)
        if unknown:
            errors.append(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(KEY_FIELDS))}")
        key = entry.get("key")
        if not isinstance(key, str) or not key:
            errors.append(f"{where}: key is empty; give the team's key (vaulted), e.g. from `openssl rand -hex 24`")
        elif key != key.strip():
            errors.append(f"{where}: key has whitespace around it (a copy-paste); remove it")
        elif not KEY_RE.match(key):
            errors.append(
                f"{where}: key has characters a bearer token cannot hold (RFC 6750: letters, digits, - . _ ~ + / and "
                "trailing =); generate one with `openssl rand -hex 24`"
            )
        elif len(key) < KEY_MIN_LEN:
            errors.append(
                f"{where}: key is shorter than {KEY_MIN_LEN} characters; generate one with `openssl rand -hex 24`"
            )
        elif len(key) > KEY_MAX_LEN:
            errors.append(
                f"{where}: key is {len(key)} characters, longer than the {KEY_MAX_LEN} the gateway's nginx key map "
                "is sized for (map_hash_bucket_size); generate one with `openssl rand -hex 24` (48 characters)"
            )
        else:
            owner, owner_key = key_owner.get(key.lower(), (None, ""))
            if owner is not None and owner_key == key:
                errors.append(
                    f"{where}: key is the same as entry {owner}'s; the access log could not tell the teams "
                    "apart - give each team its own key"
                )
            elif owner is not None:
                errors.append(
                    f"{where}: key differs from entry {owner}'s only in case, and nginx's map matches strings "
                    "ignoring case: either key would be taken for the other - give each team its own key (e.g. "
                    "`openssl rand -hex 24`)"
                )
            key_owner.setdefault(key.lower(), (f"{index} ({ident})", key))
        for name in LIMITS:
            value = entry.get(name, defaults.get(name))
            number = _whole(value)
            if name not in entry and name not in defaults:
                errors.append(f"{where}: {name} is not set and fleet_gateway_default_limits has none; give {name}: N")
            elif number is None or number < 1:
                errors.append(
                    f"{where}: {name} is {value!r}, not a whole number >= 1 of {LIMITS[name]}; give e.g. {name}: 60"
                )
    return errors


def fleet_keys(keys: list[dict], defaults: dict | None = None) -> list[dict]:
    """The checked keys with their limits filled in from the defaults, as whole numbers (for the templates)."""
    defaults = defaults or {}
    return [
        {
            "id": entry["id"],
            "key": entry["key"],
            **{name: _whole(entry.get(name, defaults.get(name))) for name in LIMITS},
        }
        for entry in keys
    ]


def fleet_workers(hosts: list[str], hostvars: dict, port_default: int) -> list[dict]:
    """The router's workers, one per serving host: {host, address, port, url}.

    The address is the host's fleet_worker_address, else its ansible_host, else its inventory name: what the
    gateway host uses to reach it (the router and nginx resolve it there). The port is the host's serve_port, else
    `port_default` (the play's serve_port, else the vocabulary's a800_serve_port: roles/a800)."""
    workers = []
    for host in hosts:
        hv = hostvars.get(host, {})
        address = str(hv.get("fleet_worker_address") or hv.get("ansible_host") or host)
        port = int(hv.get("serve_port") or port_default)
        workers.append({"host": host, "address": address, "port": port, "url": f"http://{address}:{port}"})
    return workers


def fleet_worker_errors(
    workers: list[dict], hostvars: dict, gateway_hosts: list[str], publish_default: str
) -> list[str]:
    """Serving hosts the gateway host could not reach, or two hosts that would be one worker. A host's published
    address is its serve_publish_address, else `publish_default` (the vocabulary's a800_serve_publish_address)."""
    errors: list[str] = []
    if not workers:
        return [
            "the router would have no worker: the serving group (fleet_serving_group) has no host in the "
            "inventory; add the serving hosts to it"
        ]
    seen: dict[str, str] = {}
    for worker in workers:
        host, url = worker["host"], worker["url"]
        parts = urlsplit(url)
        if not parts.hostname:
            errors.append(f"{host}: the worker URL {url} has no host name; set fleet_worker_address on {host}")
        if url in seen:
            errors.append(
                f"{host} and {seen[url]} are the same worker {url}: the router would send both hosts' share to one; "
                f"set fleet_worker_address (or ansible_host) on {host} to its own address"
            )
        seen.setdefault(url, host)
        publish = str(hostvars.get(host, {}).get("serve_publish_address") or publish_default)
        remote_gateway = any(g != host for g in gateway_hosts)
        if publish.startswith("127.") and remote_gateway:
            errors.append(
                f"{host}: serve_publish_address is {publish} (loopback), so the router on "
                f"{', '.join(g for g in gateway_hosts if g != host)} cannot reach {url}; set serve_publish_address "
                f"on {host} to its cluster address (or 0.0.0.0) together with serve_api_key"
            )
    return errors


def fleet_missing_workers(expected: list[dict], listed: Any) -> list[dict]:
    """The expected workers that the router does not list (GET /list_workers answers {"urls": [...]})."""
    urls = set((listed or {}).get("urls", []) if isinstance(listed, dict) else [])
    return [w for w in expected if w["url"] not in urls]


def vllm_requests_in_flight(metrics_text: str) -> int:
    """Requests running or waiting on a vLLM server, from its /metrics text (vllm:num_requests_running and
    vllm:num_requests_waiting, summed over engines and models). No text (the server does not answer): 0."""
    total = 0.0
    for line in (metrics_text or "").splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
            try:
                total += float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
    return int(total)


def fleet_router_constraints(text: str, python_version: str) -> str:
    """The router's constraints file (roles/fleet/files) as pip reads it on a gateway whose Python is python_version
    ("3.12"): each line's marker evaluated for that Python and dropped, the lines for other Pythons left out. pip
    evaluates the markers of a constraints file against the Python that runs it, never against --python-version
    (pypa/pip#11010), so the bundle downloads each gateway's wheels with the file this returns. Two pins of one
    package for one Python, or a line that is not name==version, raise."""
    env = {"python_version": python_version, "python_full_version": python_version + ".0"}
    pins: dict[str, str] = {}
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement as err:
            raise ValueError(f"vllm-router constraints, line {number}: {line!r} is not a requirement ({err})") from err
        specs = list(req.specifier)
        if len(specs) != 1 or specs[0].operator != "==" or req.extras or req.url:
            raise ValueError(f"vllm-router constraints, line {number}: {line!r} must pin one version (name==version)")
        if req.marker is not None and not Marker(str(req.marker)).evaluate(env):
            continue
        name = canonicalize_name(req.name)
        if name in pins:
            raise ValueError(
                f"vllm-router constraints, line {number}: {req.name} is pinned twice for Python {python_version} "
                f"({pins[name]} and {specs[0].version}): give each pin a marker that the other's excludes"
            )
        pins[name] = specs[0].version
        lines.append(f"{req.name}=={specs[0].version}")
    return "\n".join(lines) + "\n"


def _wheel_fits(filename: str, python_tag: str) -> bool:
    """Whether a wheel's interpreter and ABI tags install on CPython python_tag (cp312): cp312-cp312, cp38-abi3,
    py3-none... (the platform tag is left to pip)."""
    version = (int(python_tag[2]), int(python_tag[3:]))
    accepted = {(t.interpreter, t.abi) for t in cpython_tags(version, platforms=["any"])}
    accepted |= {(t.interpreter, t.abi) for t in compatible_tags(version, python_tag, platforms=["any"])}
    try:
        tags = parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return False
    return any((t.interpreter, t.abi) in accepted for t in tags)


def fleet_router_wheel_problems(manifest: Any, python_tag: str, version: str, bundle: str) -> list[str]:
    """Why the offline bundle's vllm-router wheels cannot be installed on this gateway, whose python3 is python_tag
    (cp312): no wheels of the router at all, none for this Python (naming the Pythons the bundle has and the
    gateway's), another router version, or a wheel whose tags do not fit (naming the wheel). Empty when they can."""
    if not re.fullmatch(r"cp3[0-9]+", str(python_tag)):
        return [f"the gateway's python3 answered {python_tag!r}, not a CPython tag such as cp312"]
    if manifest is None:
        return [
            f"fleet_router_bundle is {bundle}, but {bundle}/manifest.json is not on this gateway: copy the offline "
            f"bundle there (rsync -a <bundle>/ <gateway>:{bundle}/), or set fleet_router_bundle to where it is"
        ]
    items = [i for i in manifest.get("items", []) if i.get("kind") == "router_wheels"]
    fix = (
        "collect the bundle again (make bundle) with the gateway's release in bundle_platforms, copy it to the "
        "gateway, or set fleet_router_bundle to '' and give pip an index (fleet_router_pip_args)"
    )
    if not items:
        return [f"the offline bundle at {bundle} has no vllm-router wheels (bundle_items without wheels?): {fix}"]
    found = [i for i in items if i.get("python") == python_tag]
    if not found:
        have = ", ".join(f"{i.get('python')} ({i.get('name')})" for i in items)
        return [
            f"the offline bundle at {bundle} has vllm-router wheels for {have}, but this gateway's python3 is "
            f"{python_tag}: wheels of one CPython do not install on another; {fix}"
        ]
    item = found[0]
    problems = []
    if str(item.get("version")) != str(version):
        problems.append(
            f"the offline bundle at {bundle} has vllm-router {item.get('version')} for {python_tag}, the BOM pins "
            f"{version} (fleet_router_version): {fix}"
        )
    wheels = [f for f in item.get("files", []) if str(f).endswith(".whl")]
    if not any(canonicalize_name(str(f).split("-", 1)[0]) == "vllm-router" for f in wheels):
        problems.append(f"the offline bundle's {item.get('path')} holds no vllm-router wheel: {fix}")
    problems += [
        f"the offline bundle's {item.get('path')}/{f} is not for {python_tag}: {fix}"
        for f in wheels
        if not _wheel_fits(str(f), python_tag)
    ]
    return problems


class FilterModule:
    def filters(self) -> dict:
        return {
            "fleet_key_errors": fleet_key_errors,
            "fleet_keys": fleet_keys,
            "fleet_workers": fleet_workers,
            "fleet_worker_errors": fleet_worker_errors,
            "fleet_missing_workers": fleet_missing_workers,
            "vllm_requests_in_flight": vllm_requests_in_flight,
            "fleet_router_constraints": fleet_router_constraints,
            "fleet_router_wheel_problems": fleet_router_wheel_problems,
        }
