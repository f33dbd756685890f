"""Filter: who holds a TCP port on the host, for the preflight (read-only, one `ss` call and one `docker ps`).

`ss -H -ltnp` (iproute2; docs/field.md#who-holds-a-port) lists every listening TCP socket, one a line without the
header, and with -p the processes that hold it:

    LISTEN 0      4096   127.0.0.1:8001 0.0.0.0:* users:(("docker-proxy",pid=9836,fd=4))
    LISTEN 0      128            *:8002       *:* users:(("python3",pid=2262,fd=4))

A port a container publishes is held by Docker's `docker-proxy` (or, without the userland proxy, by no process at
all: a NAT rule), so the containers' published ports (`docker ps --format '{{.Names}}\t{{.Ports}}'`:
`127.0.0.1:8001->8001/tcp, :::8001->8001/tcp`) name the container instead. The serving container itself
(serve_container_name, kept or replaced by the serve phase) holding the port is no conflict.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, PENDING, check

_USER = re.compile(r'\("(?P<name>(?:[^"\\]|\\.)*)",pid=(?P<pid>\d+),fd=\d+\)')
_PUBLISHED = re.compile(r"^(?P<address>.*):(?P<low>\d+)(?:-(?P<high>\d+))?->\d+(?:-\d+)?/(?P<proto>\w+)$")


def ss_listeners(text: str) -> list[dict[str, Any]]:
    """The lines of `ss -H -ltnp` as {local, port, processes: [{name, pid}]}."""
    out = []
    for line in (text or "").splitlines():
        fields = line.split(None, 5)
        if len(fields) < 5 or not fields[3].rpartition(":")[2].isdigit():
            continue
        rest = fields[5] if len(fields) > 5 else ""
        processes = [{"name": m["name"], "pid": int(m["pid"])} for m in _USER.finditer(rest)]
        out.append({"local": fields[3], "port": int(fields[3].rpartition(":")[2]), "processes": processes})
    return out


def published_ports(text: str) -> dict[str, list[tuple[int, str]]]:
    """`docker ps --format '{{.Names}}\\t{{.Ports}}'` as name -> [(host port, binding text)] for TCP."""
    out: dict[str, list[tuple[int, str]]] = {}
    for line in (text or "").splitlines():
        name, _, ports = line.partition("\t")
        if not name.strip():
            continue
        entries = out.setdefault(name.strip(), [])
        for item in (p.strip() for p in ports.split(",")):
            match = _PUBLISHED.match(item)
            if match and match["proto"] == "tcp":
                low = int(match["low"])
                for port in range(low, int(match["high"] or low) + 1):
                    entries.append((port, item))
    return out


def port_holders_check(
    port: Any,
    own_container: str,
    ss_text: str,
    ss_rc: Any = 0,
    ps_text: str = "",
    ps_rc: Any = 0,
    variable: str = "serve_port",
) -> dict[str, Any]:
    """Check record `port_free` for one configured port: who holds it (container or process, with name and PID),
    pass when nothing or only `own_container` holds it; pending when `ss` could not be run."""
    port = int(port)
    name = "port_free" if variable == "serve_port" else f"port_free:{variable}"
    if int(ss_rc) != 0:
        return check(name, PENDING, "ss -H -ltnp", None, "free", f"ss could not be run (iproute2): {ss_text}".strip())
    listeners = [entry for entry in ss_listeners(ss_text) if entry["port"] == port]
    containers = published_ports(ps_text) if int(ps_rc) == 0 else {}
    publishers = {c: [b for p, b in binds if p == port] for c, binds in containers.items()}
    publishers = {c: binds for c, binds in publishers.items() if binds}
    others = {c: binds for c, binds in publishers.items() if c != own_container}
    holders = [f"container {c} ({', '.join(binds)})" for c, binds in sorted(others.items())]
    unnamed = []
    for entry in listeners:
        for process in entry["processes"]:
            if process["name"] == "docker-proxy" and publishers:
                continue  # a published port: the container is named above (or is ours)
            holders.append(f"process {process['name']} (pid {process['pid']}, {entry['local']})")
        if not entry["processes"] and not publishers:
            unnamed.append(entry["local"])
    holders += [f"a process ss does not name ({local}; run the preflight as root)" for local in unnamed]
    unique = list(dict.fromkeys(holders))
    ours = own_container in publishers
    if not unique:
        detail = f"port {port} is " + (f"held by our container {own_container}" if ours else "free")
        return check(name, PASS, variable, "free" if not ours else f"container {own_container}", "free", detail)
    stops = [h.split()[1] for h in unique if h.startswith("container ")]
    pids = [h.split("pid ")[1].split(",")[0] for h in unique if h.startswith("process ")]
    fix = "; ".join(
        ([f"stop the container (docker stop {' '.join(stops)})"] if stops else [])
        + ([f"stop the process (kill {' '.join(pids)})"] if pids else [])
        + [f"or set {variable} to a free port"]
    )
    return check(
        name,
        FAIL,
        variable,
        unique,
        f"free or held by container {own_container}",
        f"port {port} is held by " + ", ".join(unique),
        fix,
    )


class FilterModule:
    def filters(self) -> dict:
        return {"port_holders_check": port_holders_check}
