"""One proxy setting for everything a host fetches: apt, the modules' own downloads (NVIDIA's signing keys), and
dockerd's pulls. Pure functions, unit-tested; the roles write what they return.

- apt reads Acquire::http(s)::Proxy from apt.conf.d, and Acquire::http(s)::Proxy::<host> "DIRECT" for a host it
  must reach without the proxy (apt-transport-http(1), apt-transport-https(1)); it has no no_proxy list of its own.
- Modules (get_url, uri, deb822_repository's key download) read http_proxy/https_proxy/no_proxy from the
  environment the task runs with.
- dockerd reads HTTP_PROXY/HTTPS_PROXY/NO_PROXY from its service environment: a systemd drop-in in
  /etc/systemd/system/docker.service.d/ (Docker docs, "Configure the daemon to use a proxy").
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

HOST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$")


def _get(proxy: Any, key: str) -> str:
    return str((proxy or {}).get(key) or "").strip()


def no_proxy_entries(proxy: Any) -> list[str]:
    raw = (proxy or {}).get("no_proxy") or ""
    items = raw if isinstance(raw, list) else str(raw).split(",")
    return [str(i).strip() for i in items if str(i).strip()]


def proxy_checks(proxy: Any, name: str = "proxy") -> list[str]:
    """Problems with the setting, each naming the variable and the fix ([] when it is usable or empty)."""
    if proxy in (None, "", {}):
        return []
    if not isinstance(proxy, dict):
        return [f"{name} must be a mapping with http, https and no_proxy (got {type(proxy).__name__})."]
    problems = []
    unknown = sorted(set(proxy) - {"http", "https", "no_proxy"})
    if unknown:
        problems.append(f"{name} has unknown keys {unknown}: only http, https and no_proxy are read.")
    for key in ("http", "https"):
        url = _get(proxy, key)
        if not url:
            continue
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            problems.append(f"{name}.{key} is {url!r}: give the proxy as http://host:port (e.g. http://10.0.0.5:3128).")
    if no_proxy_entries(proxy) and not (_get(proxy, "http") or _get(proxy, "https")):
        problems.append(f"{name}.no_proxy is set but neither {name}.http nor {name}.https: set the proxy, or drop it.")
    return problems


def proxy_environment(proxy: Any) -> dict[str, str]:
    """The environment of a task that fetches (both spellings: curl and Python read the lower case, Go the upper)."""
    http, https = _get(proxy, "http"), _get(proxy, "https")
    if not (http or https):
        return {}
    env = {}
    if http:
        env["http_proxy"] = env["HTTP_PROXY"] = http
    if https:
        env["https_proxy"] = env["HTTPS_PROXY"] = https
    no_proxy = ",".join(no_proxy_entries(proxy))
    if no_proxy:
        env["no_proxy"] = env["NO_PROXY"] = no_proxy
    return env


def apt_direct_hosts(proxy: Any) -> list[str]:
    """The no_proxy entries apt can express: exact host names and addresses (apt has no domain suffix or CIDR
    form; a leading dot is dropped, CIDR ranges and * are left out)."""
    hosts = []
    for entry in no_proxy_entries(proxy):
        host = entry.lstrip(".").split(":")[0]
        if host and host != "*" and "/" not in host and HOST_RE.match(host) and host not in hosts:
            hosts.append(host)
    return hosts


def apt_proxy_conf(proxy: Any) -> str:
    """/etc/apt/apt.conf.d/ content ("" when no proxy is set)."""
    http, https = _get(proxy, "http"), _get(proxy, "https")
    if not (http or https):
        return ""
    lines = ["// Written by Ansible (a800.vllm): the site's proxy for apt; hosts in no_proxy are reached directly."]
    for scheme, url in (("http", http), ("https", https)):
        if url:
            lines.append(f'Acquire::{scheme}::Proxy "{url}";')
            lines += [f'Acquire::{scheme}::Proxy::{host} "DIRECT";' for host in apt_direct_hosts(proxy)]
    return "\n".join(lines) + "\n"


def docker_proxy_dropin(proxy: Any) -> str:
    """The docker.service drop-in ("" when no proxy is set)."""
    env = proxy_environment(proxy)
    if not env:
        return ""
    lines = ["# Written by Ansible (a800.vllm): the site's proxy for dockerd's pulls.", "[Service]"]
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
        if key in env:
            lines.append(f'Environment="{key}={env[key]}"')
    return "\n".join(lines) + "\n"
