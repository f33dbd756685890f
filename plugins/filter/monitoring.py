"""What Prometheus scrapes, computed from the inventory (roles/monitoring, docs/monitoring.md), and the rules' and
dashboards' own checks: the expressions a dashboard asks, and the alerts Prometheus reports."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.a800.vllm.plugins.module_utils.checks import FAIL, PASS, check

YES = ("true", "1", "yes")


def _address(host: str, hostvars: dict, self_host: str) -> str:
    """How the monitoring host reaches a host: itself on loopback, another by its monitoring_address, else its
    fleet_worker_address, else its ansible_host, else its inventory name."""
    if host == self_host:
        return "127.0.0.1"
    hv = hostvars.get(host, {})
    return str(hv.get("monitoring_address") or hv.get("fleet_worker_address") or hv.get("ansible_host") or host)


def monitoring_prometheus_url(address: str, port: int | str, wildcard_host: str | None = None) -> str:
    """Prometheus' base URL (no trailing slash) from its listen address (monitoring_prometheus_address) and port: the
    address itself when Prometheus listens on one address, since nothing else answers then; when it listens on every
    interface (0.0.0.0, ::, empty), `wildcard_host`, by default loopback. Verify, `a800vllm status`, the role's own
    checks and Grafana's data source all ask from the monitoring host itself, where loopback is right; the report's
    URL passes the host's own address (monitoring_address, ansible_host) for a reader elsewhere."""
    host = str(address or "").strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host in ("", "0.0.0.0", "::"):
        host = wildcard_host or ("::1" if host == "::" else "127.0.0.1")
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{int(port)}"


def monitoring_scrape_jobs(groups: dict, hostvars: dict, self_host: str, settings: dict) -> list[dict]:
    """The scrape jobs, each {job_name, targets: [{host, address}]}: vllm (every serving host's /metrics), vllm_health
    (its /health, probed through the blackbox exporter: `probe` set, the address a URL), node (node
    exporter on every serving, gateway and monitoring host), dcgm (the serving hosts with monitoring_dcgm_enabled),
    router and gateway (vllm-router's and mtail's metrics on every gateway host). A host that does not set a port or
    monitoring_dcgm_enabled gets `settings`' (the monitoring host's values, which default to the vocabulary's)."""
    servers = list(groups.get(settings["serving_group"], []))
    gateways = list(groups.get(settings["gateway_group"], []))
    monitors = list(groups.get(settings["monitoring_group"], []))

    def targets(hosts: list[str], port_of) -> list[dict]:  # each host once, in inventory order
        unique = dict.fromkeys(hosts)
        return [{"host": h, "address": f"{_address(h, hostvars, self_host)}:{port_of(h)}"} for h in unique]

    def var(host: str, name: str, default: Any) -> Any:
        value = hostvars.get(host, {}).get(name)
        return default if value in (None, "") else value

    vllm = targets(servers, lambda h: int(var(h, "serve_port", settings["vllm_port"])))
    jobs = [
        {"job_name": "vllm", "targets": vllm},
        # /health through the blackbox exporter on this host: 503 once the engine died, even while /metrics answers.
        {
            "job_name": "vllm_health",
            "probe": True,
            "targets": [{"host": t["host"], "address": f"http://{t['address']}/health"} for t in vllm],
        },
        {"job_name": "node", "targets": targets(servers + gateways + monitors, lambda h: settings["node_port"])},
        {
            "job_name": "dcgm",
            "targets": targets(
                [h for h in servers if str(var(h, "monitoring_dcgm_enabled", settings["dcgm_enabled"])).lower() in YES],
                lambda h: settings["dcgm_port"],
            ),
        },
        {
            "job_name": "router",
            "targets": targets(gateways, lambda h: int(var(h, "fleet_router_metrics_port", settings["router_port"]))),
        },
        {
            "job_name": "gateway",
            "targets": targets(gateways, lambda h: int(var(h, "fleet_gateway_metrics_port", settings["gateway_port"]))),
        },
    ]
    return [job for job in jobs if job["targets"]]


def monitoring_target_errors(
    groups: dict, hostvars: dict, self_host: str, serving_group: str, publish_default: str
) -> list[str]:
    """Serving hosts whose /metrics the monitoring host could not reach: published on loopback to another host. A
    host's published address is its serve_publish_address, else `publish_default` (a800_serve_publish_address)."""
    errors = []
    for host in groups.get(serving_group, []):
        publish = str(hostvars.get(host, {}).get("serve_publish_address") or publish_default)
        if host != self_host and publish.startswith("127."):
            errors.append(
                f"{host}: serve_publish_address is {publish} (loopback), so Prometheus on {self_host} cannot scrape "
                f"its /metrics; set serve_publish_address on {host} to its cluster address (or 0.0.0.0) together "
                f"with serve_api_key, or put {host} itself in the monitoring group"
            )
    return errors


def monitoring_dashboard_queries(dashboard: dict, substitutions: dict | None = None) -> list[dict]:
    """Every PromQL expression of a Grafana dashboard, {panel, ref, expr, needs}, with Grafana's variables replaced
    (by default $__rate_interval -> 1m and every other $var -> .*). `needs` is the panel's description tag
    `needs: X` (e.g. a GPU panel needs dcgm), so that a test bed without that source can say what it skipped."""
    subs = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h"}
    subs.update(substitutions or {})
    names = [str(v.get("name")) for v in dashboard.get("templating", {}).get("list", [])]
    queries = []

    def walk(panels: list) -> None:
        for panel in panels:
            walk(panel.get("panels", []))
            needs = ""
            for word in str(panel.get("description", "")).split(";"):
                if word.strip().startswith("needs:"):
                    needs = word.split(":", 1)[1].strip()
            for target in panel.get("targets", []):
                expr = str(target.get("expr", ""))
                if not expr:
                    continue
                for key, value in subs.items():
                    expr = expr.replace(key, value)
                for name in names:
                    expr = expr.replace(f"${{{name}}}", ".*").replace(f"${name}", ".*")
                if "$" in expr:
                    raise AnsibleFilterError(f"panel {panel.get('title')!r}: unknown variable in {target['expr']!r}")
                queries.append({"panel": panel.get("title"), "ref": target.get("refId"), "expr": expr, "needs": needs})

    walk(dashboard.get("panels", []))
    return queries


def monitoring_firing(alerts_response: dict) -> list[dict]:
    """The firing alerts of Prometheus' /api/v1/alerts answer, {alert, severity, host, summary, since}, worst first."""
    alerts = (alerts_response or {}).get("data", {}).get("alerts", [])
    firing = [
        {
            "alert": a.get("labels", {}).get("alertname", ""),
            "severity": a.get("labels", {}).get("severity", ""),
            "host": a.get("labels", {}).get("host", a.get("labels", {}).get("instance", "")),
            "summary": a.get("annotations", {}).get("summary", ""),
            "since": a.get("activeAt", ""),
        }
        for a in alerts
        if a.get("state") == "firing"
    ]
    order = {"critical": 0, "warning": 1}
    return sorted(firing, key=lambda a: (order.get(a["severity"], 2), a["alert"], a["host"]))


def monitoring_dcgm_image_check(image: str, manifest: dict | None, bundle: str, on_host: bool) -> dict:
    """The preflight's check of an air-gapped serving host that runs dcgm-exporter (roles/monitoring/tasks/
    preflight.yml): the host never pulls the image (monitoring_dcgm_pull: never), so it must be one of the offline
    bundle's images (its manifest.json, None when unreadable), which the host phase loads, or on the host already."""
    images = [i for i in (manifest or {}).get("items", []) if i.get("kind") == "image"]
    item = next((i for i in images if i.get("name") == image), None)
    found = (
        f"is in the offline bundle ({item.get('path', '')}): loaded, never pulled" if item is not None
        else "is on the host already (an air-gapped host never pulls it)" if on_host
        else ""
    )  # fmt: skip
    checked = ("dcgm_exporter_image", PASS if found else FAIL, "monitoring_dcgm_image", image,
               "in the offline bundle or on the host")  # fmt: skip
    if found:
        return check(*checked, f"dcgm-exporter's image {image} {found}")
    held = (
        f"{bundle}/manifest.json cannot be read"
        if manifest is None
        else f"the bundle at {bundle} holds {', '.join(i.get('name', '') for i in images) or 'no image'}"
    )
    return check(
        *checked,
        f"dcgm-exporter's image {image} is neither in the offline bundle nor on this air-gapped host, which cannot "
        f"pull it ({held})",
        "collect the bundle again with its images item from an inventory that has the monitoring group (make bundle "
        "BUNDLE_DIR=...; bundle_dcgm_exporter_image), or docker load the image onto the host, or set "
        "monitoring_dcgm_enabled: false for this host",
    )  # fmt: skip


class FilterModule:
    def filters(self) -> dict:
        return {
            "monitoring_scrape_jobs": monitoring_scrape_jobs,
            "monitoring_target_errors": monitoring_target_errors,
            "monitoring_dashboard_queries": monitoring_dashboard_queries,
            "monitoring_firing": monitoring_firing,
            "monitoring_prometheus_url": monitoring_prometheus_url,
            "monitoring_dcgm_image_check": monitoring_dcgm_image_check,
        }
