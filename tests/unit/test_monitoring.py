"""The monitoring role's rules, routes, dashboards and scrape jobs (roles/monitoring, docs/monitoring.md), checked by
the tools Prometheus itself ships: promtool (check rules, test rules), amtool (check-config, config routes test) and
mtail (the gateway's log program), the distribution's binaries unpacked into .tools/ by tests/testbed/install-deps.sh.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml
from conftest import VOCABULARY

from plugins.filter.monitoring import (
    FilterModule,
    monitoring_dashboard_queries,
    monitoring_firing,
    monitoring_prometheus_url,
    monitoring_scrape_jobs,
    monitoring_target_errors,
)
from plugins.module_utils.vllm_log import start_metrics

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools" / "monitoring" / "bin"
ROLE = ROOT / "roles" / "monitoring"
TESTS = ROOT / "tests" / "monitoring"
DASHBOARD = ROLE / "files" / "dashboards" / "a800-vllm.json"
DCGM_COUNTERS = ROOT / "tests" / "fixtures" / "dcgm-exporter" / "default-counters.csv"
REAL_VLLM = ROOT / "tests" / "contract" / "REAL_VLLM_SHAPES.md"
DOUBLE_METRICS = ROOT / "tests" / "doubles" / "vllm" / "src" / "vllm" / "_double" / "metrics.py"


def tool(name: str) -> str:
    path = TOOLS / name
    assert path.exists(), f"{path} is missing: run tests/testbed/install-deps.sh (make deps)"
    return str(path)


def run(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd, check=False)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    """The rule, Alertmanager and Prometheus files exactly as the role writes them, with the production inventory's
    profile (tests/monitoring/render.yml; listen-10.0.0.9.*: Prometheus listening on one address)."""
    out = tmp_path_factory.mktemp("monitoring")
    result = run(
        str(ROOT / ".venv" / "bin" / "ansible-playbook"),
        "-i",
        str(ROOT / "inventories" / "prod"),
        str(TESTS / "render.yml"),
        "-e",
        f"monitoring_render_dir={out}",
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    shutil.copy(TESTS / "a800-alerts.test.yml", out)
    return out


def rule_data() -> list[dict]:
    groups = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__monitoring_rule_groups"]
    return [rule for group in groups for rule in group["rules"]]


def rendered_rules(rendered: Path) -> list[dict]:
    doc = yaml.safe_load((rendered / "a800-alerts.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def jinja(template: str, **variables) -> str:
    """A task's or default's template rendered as Ansible would here: the collection's filters (by FQCN), Jinja's own
    `default` and `urlencode`, and the Ansible pieces they use (lookup('ansible.builtin.file'), from_yaml, flatten of
    lists)."""
    env = jinja2.Environment(undefined=jinja2.ChainableUndefined)
    env.filters.update({f"a800.vllm.{name}": func for name, func in FilterModule().filters().items()})
    env.filters["ansible.builtin.from_yaml"] = yaml.safe_load
    env.filters["flatten"] = lambda lists: [x for sub in lists for x in sub]
    env.globals["lookup"] = lambda plugin, path: Path(path).read_text() if plugin == "ansible.builtin.file" else None
    return env.from_string(template).render(**variables).strip()


# --- rules ----------------------------------------------------------------------------------------------------------


def test_promtool_accepts_the_rules_and_every_case_passes(rendered):
    check = run(tool("promtool"), "check", "rules", str(rendered / "a800-alerts.yml"))
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(rule_data())} rules found" in check.stdout
    test = run(tool("promtool"), "test", "rules", str(rendered / "a800-alerts.test.yml"))
    assert test.returncode == 0, test.stdout + test.stderr


def test_every_rule_has_a_case_that_fires_and_one_that_stays_quiet():
    cases = yaml.safe_load((TESTS / "a800-alerts.test.yml").read_text())["tests"]
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in cases:
        for check in case["alert_rule_test"]:
            (fires if check["exp_alerts"] else quiet).add(check["alertname"])
    names = [rule["alert"] for rule in rule_data()]
    assert len(names) == len(set(names)) >= 14
    assert sorted(fires) == sorted(names), "a rule without a case that fires"
    assert sorted(quiet) == sorted(names), "a rule without a case that stays quiet"


def test_the_rule_count_is_read_from_the_rules_wherever_it_is_checked():
    """roles/verify's expected count is its default evaluated (the number of the vocabulary's alert names, which are the
    rules' own names in order), the monitoring role's own check compares the names it loaded with the same list, the
    serve scenario reads the list; the docs state the same number."""
    count = len(rule_data())
    vocabulary = VOCABULARY["a800_alert_names"]
    assert vocabulary == [rule["alert"] for rule in rule_data()]
    default = yaml.safe_load((ROOT / "roles/verify/defaults/main.yml").read_text())["verify_monitoring_rules"]
    assert jinja(default, a800_alert_names=vocabulary) == str(count)
    check = (ROLE / "tasks" / "check.yml").read_text()
    assert "__monitoring_rule_groups | map(attribute='rules') | flatten | map(attribute='alert')" in check
    for path in ("docs/monitoring.md", "docs/phases.md"):
        stated = re.findall(r"\b(\d+)(?:\*\*)? (?:\*\*)?(?:alert )?rules\b", (ROOT / path).read_text())
        assert stated and {int(n) for n in stated} == {count}, (path, stated)
    serve = (ROOT / "molecule/serve/tests/test_monitoring.py").read_text()
    assert "__monitoring_rule_groups" in serve and not re.search(r"== \d+\b.*rule|rule.*== \d+\b", serve)


def test_a_case_with_the_wrong_expectation_fails(rendered, tmp_path):
    """The cases can fail: the engine-down case expecting a quiet rule is refused."""
    doc = yaml.safe_load((rendered / "a800-alerts.test.yml").read_text())
    doc["tests"] = [doc["tests"][0]]
    doc["tests"][0]["alert_rule_test"][0]["exp_alerts"] = []
    doc["rule_files"] = [str(rendered / "a800-alerts.yml")]
    (tmp_path / "wrong.test.yml").write_text(yaml.safe_dump(doc))
    result = run(tool("promtool"), "test", "rules", str(tmp_path / "wrong.test.yml"))
    assert result.returncode != 0
    assert "A800VllmDown" in result.stdout + result.stderr


def test_a_rule_that_does_not_parse_is_refused_before_prometheus_reads_it(rendered, tmp_path):
    """What the role's `validate: promtool check rules %s` does with a threshold that is not a number."""
    text = (rendered / "a800-alerts.yml").read_text().replace("> 0.9", "> ninety percent", 1)
    (tmp_path / "bad.yml").write_text(text)
    result = run(tool("promtool"), "check", "rules", str(tmp_path / "bad.yml"))
    assert result.returncode != 0
    assert "A800VllmKvCacheHigh" in result.stdout + result.stderr or "parse" in result.stdout + result.stderr


def test_every_rule_names_its_severity_and_the_source_of_its_threshold(rendered):
    for rule in rendered_rules(rendered):
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["annotations"]["threshold"], rule["alert"]
        assert "{{ $labels.host }}" in rule["annotations"]["summary"] or "key_id" in rule["annotations"]["summary"]


def test_the_thresholds_come_from_the_profile_and_the_weights_role(rendered):
    rules = {rule["alert"]: rule for rule in rendered_rules(rendered)}
    profile = yaml.safe_load((ROOT / "inventories/prod/group_vars/all/model_profile.yml").read_text())["model_profile"]
    ttft = rules["A800VllmTtftP95High"]["expr"]
    assert f"[5m]))) > {profile['baselines']['ttft_s']['range'][1]} and " in ttft
    assert ttft.endswith('(increase(vllm:time_to_first_token_seconds_bucket{le="+Inf"}[5m])) >= 20')
    weights = yaml.safe_load((ROOT / "roles/weights/defaults/main.yml").read_text())
    assert weights["weights_residency_threshold_pct"] == "{{ a800_residency_threshold_pct }}"
    assert rules["A800WeightsPageCacheLow"]["expr"].endswith(f"< {VOCABULARY['a800_residency_threshold_pct'] / 100}")
    assert "vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc" in rules["A800VllmKvCacheHigh"]["expr"]


def test_the_xid_rules_split_nvidias_classes_and_fire_only_on_a_new_xid(rendered):
    """dcgm-exporter's DCGM_FI_DEV_XID_ERRORS holds the last XID until it restarts, so no rule may alert on its value
    alone (`> 0` stayed critical forever after one application XID); each class rule compares with the window before
    and fires for that window only (the promtool cases show both the firing and the resolving)."""
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    application, hardware = defaults["monitoring_xid_application"], defaults["monitoring_xid_hardware"]
    assert application == [13, 31, 43, 45] and hardware == [48, 63, 64, 74, 79, 94, 95]
    rules = {rule["alert"]: rule for rule in rendered_rules(rendered)}
    reading = [name for name, rule in rules.items() if "DCGM_FI_DEV_XID_ERRORS" in rule["expr"]]
    assert sorted(reading) == ["A800GpuXidApplication", "A800GpuXidHardware"]
    for name, xids, other, severity in (
        ("A800GpuXidHardware", hardware, application, "critical"),
        ("A800GpuXidApplication", application, hardware, "warning"),
    ):
        expr = rules[name]["expr"]
        assert sorted(int(x) for x in re.findall(r"DCGM_FI_DEV_XID_ERRORS == (\d+)", expr)) == sorted(xids)
        assert not set(other) & set(xids)
        assert expr.startswith("max_over_time(((") and expr.endswith(")[10m:1m])")
        assert "unless DCGM_FI_DEV_XID_ERRORS == last_over_time(DCGM_FI_DEV_XID_ERRORS[10m] offset 1m)" in expr
        assert rules[name]["labels"]["severity"] == severity


# --- Prometheus itself ------------------------------------------------------------------------------------------------


def test_prometheus_runs_without_its_lifecycle_api_and_reloads_by_sighup(rendered):
    """--web.enable-lifecycle opens POST /-/quit and /-/reload to anyone who reaches the port; nothing uses them: the
    role reloads through systemd (Debian's prometheus.service: ExecReload=/bin/kill -HUP $MAINPID) and restarts when
    the arguments change."""
    for name in ("prometheus.default", "listen-10.0.0.9.prometheus.default"):
        args = re.search(r'^ARGS="([^"]*)"$', (rendered / name).read_text(), re.M).group(1).split()
        assert args[0].startswith("--web.listen-address=") and "--web.enable-lifecycle" not in args, args
    for path in (ROLE / "defaults" / "main.yml", ROLE / "meta" / "argument_specs.yml"):
        assert "enable-lifecycle" not in path.read_text(), path
    users = [
        str(path.relative_to(ROOT))
        for top in ("roles", "playbooks", "plugins", "a800vllm", "molecule", "tests/monitoring")
        for path in (ROOT / top).rglob("*")
        if path.is_file()
        and path.suffix in (".yml", ".yaml", ".j2", ".py", ".sh", ".json")
        and re.search(r"/-/(reload|quit)\b", path.read_text(errors="replace"))
    ]
    assert users == [], users
    handlers = {h["name"]: h for h in yaml.safe_load((ROLE / "handlers" / "main.yml").read_text())}
    assert handlers["Reload Prometheus"]["ansible.builtin.systemd_service"] == {
        "name": "prometheus.service",
        "state": "reloaded",
    }


def test_the_prometheus_url_is_the_address_it_listens_on_or_loopback():
    assert monitoring_prometheus_url("0.0.0.0", 9090) == "http://127.0.0.1:9090"
    assert monitoring_prometheus_url("", "9091") == "http://127.0.0.1:9091"
    assert monitoring_prometheus_url("10.0.0.9", 9090) == "http://10.0.0.9:9090"
    assert monitoring_prometheus_url("127.0.0.1", 9090) == "http://127.0.0.1:9090"
    assert monitoring_prometheus_url("::", 9090) == "http://[::1]:9090"
    assert monitoring_prometheus_url("[fd00::9]", 9090) == "http://[fd00::9]:9090"
    assert monitoring_prometheus_url("0.0.0.0", 9090, "gw.lan") == "http://gw.lan:9090"  # the report's URL
    assert monitoring_prometheus_url("10.0.0.9", 9090, "gw.lan") == "http://10.0.0.9:9090"


def uri_urls(tasks: list[dict]) -> list[str]:
    return [t["ansible.builtin.uri"]["url"] for t in tasks if "ansible.builtin.uri" in t]


LISTEN = [
    ({}, "http://127.0.0.1:9090"),  # the role's defaults: every interface (0.0.0.0), port 9090
    ({"monitoring_prometheus_address": "10.0.0.9", "monitoring_prometheus_port": 9091}, "http://10.0.0.9:9091"),
]


@pytest.mark.parametrize(("mon_vars", "base"), LISTEN)
def test_verify_status_and_the_role_ask_prometheus_at_its_listen_address(mon_vars, base):
    """Every query runs on the monitoring host (the role's checks; verify delegates there; `a800vllm status` plays on
    it): loopback answers when Prometheus listens on every interface, only its own address when it listens on one."""
    verify_main = yaml.safe_load((ROOT / "roles/verify/tasks/main.yml").read_text())
    include = next(t for t in verify_main if t.get("ansible.builtin.include_tasks") == "monitoring.yml")
    hostvars = {"gw": dict(mon_vars, ansible_host="192.0.2.9")}
    verify_url = jinja(
        include["vars"]["__verify_prometheus_url"], hostvars=hostvars, __verify_monitor="gw", **VOCABULARY
    )
    assert verify_url == base
    verify_tasks = yaml.safe_load((ROOT / "roles/verify/tasks/monitoring.yml").read_text())
    urls = [jinja(u, __verify_prometheus_url=verify_url, inventory_hostname="gpu-1", item="rules")
            for u in uri_urls(verify_tasks)]  # fmt: skip
    assert len(urls) == 2 and all(u.startswith(base + "/api/v1/") for u in urls), urls
    kept = next(t for t in verify_tasks if "ansible.builtin.set_fact" in t)
    report = jinja(kept["ansible.builtin.set_fact"]["verify_monitoring"]["prometheus_url"],
                   __mon_vars=hostvars["gw"], __verify_monitor="gw", **VOCABULARY)  # fmt: skip
    assert report == ("http://192.0.2.9:9090" if not mon_vars else base)

    status = yaml.safe_load((ROOT / "a800vllm/playbooks/status.yml").read_text())
    [alerts] = uri_urls(next(p for p in status if p["hosts"] == "a800_monitoring")["tasks"])
    assert jinja(alerts, **VOCABULARY | mon_vars) == base + "/api/v1/alerts"

    role_url = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__monitoring_prometheus_url"]
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    listen = {
        k: jinja(defaults[k], **VOCABULARY) for k in ("monitoring_prometheus_address", "monitoring_prometheus_port")
    }
    listen |= mon_vars
    role_base = jinja(role_url, **listen)
    assert role_base == base
    checks = [jinja(u, __monitoring_prometheus_url=role_base, item="rules")
              for u in uri_urls(yaml.safe_load((ROLE / "tasks" / "check.yml").read_text()))]  # fmt: skip
    assert len(checks) == 3 and all(u.startswith(base + "/") for u in checks), checks


def test_prometheus_scrapes_itself_and_grafana_reads_it_where_it_listens(rendered):
    for prefix, host in (("", "127.0.0.1"), ("listen-10.0.0.9.", "10.0.0.9")):
        config = yaml.safe_load((rendered / f"{prefix}prometheus.yml").read_text())
        itself = next(job for job in config["scrape_configs"] if job["job_name"] == "prometheus")
        assert itself["static_configs"][0]["targets"] == [f"{host}:9090"]
        source = yaml.safe_load((rendered / f"{prefix}grafana-datasource.yml").read_text())
        assert source["datasources"][0]["url"] == f"http://{host}:9090"
    for path in ("roles/verify/tasks/monitoring.yml", "roles/verify/tasks/main.yml", "a800vllm/playbooks/status.yml",
                 "roles/monitoring/tasks/check.yml", "roles/monitoring/templates/prometheus.yml.j2",
                 "roles/monitoring/templates/grafana-datasource.yml.j2"):  # fmt: skip
        text = (ROOT / path).read_text()
        assert not re.search(r"127\.0\.0\.1:\{\{ *(monitoring_prometheus_port|__verify_prometheus_port)", text), path


# --- Alertmanager ---------------------------------------------------------------------------------------------------


def test_amtool_accepts_the_routes_and_sends_each_severity_to_its_receiver(rendered):
    config = str(rendered / "alertmanager.yml")
    check = run(tool("amtool"), "check-config", config)
    assert check.returncode == 0, check.stdout + check.stderr
    for rule in rendered_rules(rendered):
        severity = rule["labels"]["severity"]
        got = run(
            tool("amtool"), "config", "routes", "test", f"--config.file={config}",
            f"alertname={rule['alert']}", f"severity={severity}",
        )  # fmt: skip
        assert got.returncode == 0, got.stderr
        want = "a800-critical" if severity == "critical" else "a800-default"
        assert got.stdout.strip() == want, (rule["alert"], got.stdout)


def test_amtool_refuses_a_route_to_a_receiver_that_does_not_exist(rendered, tmp_path):
    doc = yaml.safe_load((rendered / "alertmanager.yml").read_text())
    doc["route"]["routes"][0]["receiver"] = "pager-that-is-not-defined"
    (tmp_path / "am.yml").write_text(yaml.safe_dump(doc))
    result = run(tool("amtool"), "check-config", str(tmp_path / "am.yml"))
    assert result.returncode != 0
    assert "pager-that-is-not-defined" in result.stdout + result.stderr


# --- dashboards -----------------------------------------------------------------------------------------------------


def dashboard_queries() -> list[dict]:
    return monitoring_dashboard_queries(json.loads(DASHBOARD.read_text()))


def test_every_dashboard_query_parses(tmp_path):
    """promtool parses each expression as a recording rule: a query Prometheus would reject fails here."""
    queries = dashboard_queries()
    assert len(queries) >= 20
    rules = [{"record": f"a800:dashboard_query_{i}", "expr": q["expr"]} for i, q in enumerate(queries)]
    (tmp_path / "queries.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run(tool("promtool"), "check", "rules", str(tmp_path / "queries.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    (tmp_path / "bad.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "d", "rules": [{"record": "a800:x", "expr": "sum(rate(x[1m])"}]}]})
    )
    assert run(tool("promtool"), "check", "rules", str(tmp_path / "bad.yml")).returncode != 0


def test_the_dashboard_is_grafana_json_with_its_variables_and_unique_panels():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "a800-vllm"
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names == ["datasource", "host"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])
    with pytest.raises(Exception, match="unknown variable"):
        monitoring_dashboard_queries({"panels": [{"title": "x", "targets": [{"expr": "up{a=~'$nope'}"}]}]})


def metric_names(expr: str) -> set[str]:
    words = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", re.sub(r'"[^"]*"', "", expr)))
    return {w for w in words if w.startswith(("vllm:", "DCGM_", "a800_"))}


def all_exprs() -> list[str]:
    return [str(r["expr"]) for r in rule_data()] + [q["expr"] for q in dashboard_queries()]


def test_the_vllm_names_are_the_real_engines_and_the_doubles():
    """Every vllm: series the rules and dashboards read is one the real vLLM 0.32.0 exports (recorded,
    tests/contract/REAL_VLLM_SHAPES.md) and the double exports, except the KV gauge's old name (vLLM before 0.10)
    and MTP's counters (a CPU engine has no speculative decoding: their names are vLLM's own dashboards')."""
    real = set(re.findall(r"^(vllm:[a-z0-9_:]+) (?:gauge|counter|histogram)", REAL_VLLM.read_text(), re.M))
    double = set(re.findall(r'"(vllm:[a-z0-9_]+)"', DOUBLE_METRICS.read_text()))
    not_on_cpu = {
        "vllm:gpu_cache_usage_perc",
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_drafts_total",
    }
    used = set().union(*(metric_names(e) for e in all_exprs()))
    base = {re.sub(r"_(bucket|count|sum)$", "", n) for n in used if n.startswith("vllm:")}
    assert base - not_on_cpu <= real, base - not_on_cpu - real
    assert base - {"vllm:gpu_cache_usage_perc"} <= double, base - double


def test_the_dcgm_names_are_in_dcgm_exporters_default_counters():
    counters = {
        line.split(",")[0].strip()
        for line in DCGM_COUNTERS.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    used = set().union(*(metric_names(e) for e in all_exprs()))
    dcgm = {n for n in used if n.startswith("DCGM_")}
    assert dcgm >= {"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_ROW_REMAP_FAILURE"}
    assert dcgm <= counters, dcgm - counters


# --- the gateway's metrics --------------------------------------------------------------------------------------------


def test_mtail_counts_the_gateways_log_lines_per_key_and_status(tmp_path):
    """The access-log line format of roles/fleet/templates/a800-fleet.conf.j2, rendered by nginx, read by the
    program of roles/fleet/files/a800-gateway.mtail."""
    conf = (ROOT / "roles/fleet/templates/a800-fleet.conf.j2").read_text()
    fmt = "".join(re.findall(r"'([^']*)'", conf.split("log_format a800_fleet escape=json", 1)[1].split(";", 1)[0]))

    def line(key_id: str, status: int, seconds: str) -> str:
        values = {
            "$time_iso8601": "2026-12-02T10:00:00+00:00", "$a800_key_id": key_id, "$request_method": "POST",
            "$uri": "/v1/chat/completions", "$status": str(status), "$request_time": seconds,
            "$upstream_addr": "127.0.0.1:30000", "$upstream_status": str(status), "$upstream_response_time": seconds,
            "$body_bytes_sent": "512",
        }  # fmt: skip
        out = fmt
        for name in sorted(values, key=len, reverse=True):
            out = out.replace(name, values[name])
        json.loads(out)
        return out

    lines = [
        line("team-a", 200, "0.512"),
        line("team-a", 200, "1.000"),
        line("team-b", 429, "0.000"),
        line("", 401, "0.000"),
    ]
    (tmp_path / "access.log").write_text("\n".join(lines) + "\n")
    program = tmp_path / "a800-gateway.mtail"
    shutil.copy(ROOT / "roles/fleet/files/a800-gateway.mtail", program)
    result = run(
        tool("mtail"), "--one_shot", "--one_shot_format", "prometheus", "--logtostderr",
        "--progs", str(program), "--logs", str(tmp_path / "access.log"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    series = dict(re.findall(r"^(a800_gateway_requests_total\{[^}]*\}) (\S+)$", result.stdout, re.M))
    got = {
        (re.search(r'key_id="([^"]*)"', k).group(1), re.search(r'status="(\d+)"', k).group(1)): float(v)
        for k, v in series.items()
    }
    assert got == {("team-a", "200"): 2.0, ("team-b", "429"): 1.0, ("", "401"): 1.0}


# --- scrape jobs and alerts -----------------------------------------------------------------------------------------

SETTINGS = {
    "serving_group": "a800_servers",
    "gateway_group": "a800_gateways",
    "monitoring_group": "a800_monitoring",
    "vllm_port": 8001,
    "node_port": 9100,
    "dcgm_port": 9400,
    "router_port": 29000,
    "gateway_port": 3903,
    "dcgm_enabled": True,
}


def test_the_scrape_jobs_follow_the_inventory():
    groups = {"a800_servers": ["gpu-1", "gpu-2"], "a800_gateways": ["gw"], "a800_monitoring": ["gw"]}
    hostvars = {
        "gpu-1": {"ansible_host": "10.0.0.1", "serve_port": 8002},
        "gpu-2": {"ansible_host": "10.0.0.2", "monitoring_address": "gpu-2.lan", "monitoring_dcgm_enabled": False},
        "gw": {"ansible_host": "10.0.0.9"},
    }
    jobs = {j["job_name"]: j["targets"] for j in monitoring_scrape_jobs(groups, hostvars, "gw", SETTINGS)}
    assert jobs["vllm"] == [
        {"host": "gpu-1", "address": "10.0.0.1:8002"},
        {"host": "gpu-2", "address": "gpu-2.lan:8001"},
    ]
    assert [t["address"] for t in jobs["vllm_health"]] == [
        "http://10.0.0.1:8002/health",
        "http://gpu-2.lan:8001/health",
    ]
    assert [t["address"] for t in jobs["node"]] == ["10.0.0.1:9100", "gpu-2.lan:9100", "127.0.0.1:9100"]
    assert jobs["dcgm"] == [{"host": "gpu-1", "address": "10.0.0.1:9400"}]
    assert jobs["router"] == [{"host": "gw", "address": "127.0.0.1:29000"}]
    assert jobs["gateway"] == [{"host": "gw", "address": "127.0.0.1:3903"}]
    single = monitoring_scrape_jobs({"a800_servers": ["one"], "a800_monitoring": ["one"]}, {}, "one", SETTINGS)
    assert [j["job_name"] for j in single] == ["vllm", "vllm_health", "node", "dcgm"]


def test_a_serving_host_published_on_loopback_to_another_monitoring_host_is_named():
    groups = {"a800_servers": ["gpu-1", "gpu-2"]}
    hostvars = {"gpu-1": {"serve_publish_address": "0.0.0.0"}, "gpu-2": {}}
    errors = monitoring_target_errors(groups, hostvars, "gw", "a800_servers", "127.0.0.1")
    assert len(errors) == 1 and errors[0].startswith("gpu-2: serve_publish_address is 127.0.0.1")
    assert monitoring_target_errors(groups, hostvars, "gpu-2", "a800_servers", "127.0.0.1") == []


def test_the_firing_alerts_are_listed_worst_first():
    answer = {
        "data": {
            "alerts": [
                {"labels": {"alertname": "A800VllmRequestsWaiting", "severity": "warning", "host": "b"},
                 "annotations": {"summary": "s1"}, "state": "firing", "activeAt": "t1"},
                {"labels": {"alertname": "A800VllmDown", "severity": "critical", "host": "a"},
                 "annotations": {"summary": "s2"}, "state": "firing", "activeAt": "t2"},
                {"labels": {"alertname": "A800VllmKvCacheHigh", "severity": "warning", "host": "a"},
                 "annotations": {}, "state": "pending", "activeAt": "t3"},
            ]
        }
    }  # fmt: skip
    got = monitoring_firing(answer)
    assert [(a["alert"], a["host"]) for a in got] == [("A800VllmDown", "a"), ("A800VllmRequestsWaiting", "b")]
    assert monitoring_firing({}) == []


def test_the_verify_checks_say_whether_this_host_is_watched():
    from plugins.filter.verify_report import verify_monitoring_checks

    other = [{"alert": "A800VllmDown", "host": "other", "summary": "s"}]
    watched = {"prometheus_url": "http://gw:9090", "up": "1", "rules_loaded": 14, "rules_expected": 14,
               "firing": other, "dashboard": "gw:/d.json"}  # fmt: skip
    assert [c["status"] for c in verify_monitoring_checks(watched, "h1")] == ["pass", "pass", "pass"]
    missed = dict(
        watched, up=None, rules_loaded=13, firing=[{"alert": "A800VllmKvCacheHigh", "host": "h1", "summary": "KV"}]
    )
    checks = {c["name"]: c for c in verify_monitoring_checks(missed, "h1")}
    assert checks["monitoring:scraped"]["status"] == "fail" and "absent" in checks["monitoring:scraped"]["detail"]
    assert checks["monitoring:rules"]["status"] == "fail"
    assert (
        checks["monitoring:alerts"]["status"] == "warn"
        and "A800VllmKvCacheHigh: KV" in checks["monitoring:alerts"]["detail"]
    )
    assert verify_monitoring_checks({}, "h1") == []


# --- air-gapped monitoring: dcgm-exporter from the offline bundle, a missing exporter a warning --------------------

DCGM_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless"


def bundle_manifest(*images: str) -> dict:
    return {"items": [{"kind": "apt", "name": "Ubuntu_24.04", "path": "apt/Ubuntu_24.04"}]
            + [{"kind": "image", "name": i, "path": f"images/{i.replace('/', '_')}.tar"} for i in images]}  # fmt: skip


def test_the_preflight_passes_an_exporter_image_in_the_bundle_or_on_the_host():
    from plugins.filter.monitoring import monitoring_dcgm_image_check

    in_bundle = monitoring_dcgm_image_check(DCGM_IMAGE, bundle_manifest("vllm/vllm-openai:v0.26.0", DCGM_IMAGE),
                                            "/srv/a800-bundle", False)  # fmt: skip
    assert in_bundle["status"] == "pass" and "in the offline bundle (images/nvcr.io_nvidia" in in_bundle["detail"]
    on_host = monitoring_dcgm_image_check(DCGM_IMAGE, bundle_manifest(), "/srv/a800-bundle", True)
    assert on_host["status"] == "pass" and "on the host already" in on_host["detail"]


@pytest.mark.parametrize("manifest", [bundle_manifest("vllm/vllm-openai:v0.26.0"), None], ids=["other-images", "none"])
def test_the_preflight_fails_an_exporter_image_an_air_gapped_host_cannot_get(manifest):
    from plugins.filter.monitoring import monitoring_dcgm_image_check
    from plugins.module_utils.checks import failure_lines as preflight_failures

    result = monitoring_dcgm_image_check(DCGM_IMAGE, manifest, "/srv/a800-bundle", False)
    assert result["status"] == "fail" and result["fact"] == "monitoring_dcgm_image"
    (line,) = preflight_failures([result])
    assert DCGM_IMAGE in line and "cannot pull it" in line
    held = "holds vllm/vllm-openai:v0.26.0" if manifest else "/srv/a800-bundle/manifest.json cannot be read"
    assert held in line
    # the fixes name the variables: the bundle's, the image's way onto the host, and turning the exporter off
    assert "bundle_dcgm_exporter_image" in line and "docker load" in line and "monitoring_dcgm_enabled: false" in line


def test_the_role_preflight_tasks_judge_only_air_gapped_serving_hosts_that_run_the_exporter(tmp_path):
    """roles/monitoring/tasks/preflight.yml run by ansible-playbook on local hosts: an offline host whose bundle
    lacks the image fails, one whose bundle has it passes, a missing manifest fails; a connected host, one with
    dcgm-exporter off and a host outside the serving group get no check."""
    import os
    import sys

    image = "a800-testbed/dcgm-exporter-not-on-this-machine:0"
    for name, images in (("with", [image]), ("without", ["vllm/vllm-openai:v0.26.0"])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(json.dumps(bundle_manifest(*images)))
    local = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "monitoring_dcgm_image": image,
    }
    cases = {
        "with": ({"a800_offline_bundle": str(tmp_path / "with")}, ["pass"]),
        "without": ({"a800_offline_bundle": str(tmp_path / "without")}, ["fail"]),
        "nomanifest": ({"a800_offline_bundle": str(tmp_path / "absent")}, ["fail"]),
        "online": ({"a800_offline_bundle": ""}, []),
        "dcgmoff": ({"a800_offline_bundle": str(tmp_path / "without"), "monitoring_dcgm_enabled": False}, []),
        "gateway": ({"a800_offline_bundle": str(tmp_path / "without")}, []),
    }
    servers = {h: dict(local, **v) for h, (v, _) in cases.items() if h != "gateway"}
    # the vocabulary the role's defaults point at, below the hosts' own values (a play's vars_files would override them)
    inventory = {"all": {"vars": VOCABULARY, "children": {
        "a800_servers": {"hosts": servers},
        "a800_gateways": {"hosts": {"gateway": dict(local, **cases["gateway"][0])}},
        "a800_monitoring": {"hosts": {"with": {}}},
    }}}  # fmt: skip
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    out = tmp_path / "out"
    out.mkdir()
    play = {"hosts": "all", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "monitoring", "tasks_from": "preflight.yml"}},
        {"ansible.builtin.copy": {"content": "{{ monitoring_preflight_results | to_json }}",
                                  "dest": str(out) + "/{{ inventory_hostname }}.json", "mode": "0644"}},
    ]}  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump([play], sort_keys=False))
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_HOME=str(ROOT / ".ansible-home"))
    playbook = Path(sys.executable).parent / "ansible-playbook"
    run_ = subprocess.run(
        [str(playbook), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run_.returncode == 0, run_.stdout[-3000:] + run_.stderr[-3000:]
    for name, (_, statuses) in cases.items():
        results = json.loads((out / f"{name}.json").read_text())
        assert [r["status"] for r in results] == statuses, (name, results)
    assert "manifest.json cannot be read" in json.loads((out / "nomanifest.json").read_text())[0]["detail"]


def test_an_air_gapped_host_never_pulls_the_exporter():
    """The role starts dcgm-exporter with monitoring_dcgm_pull: never where offline_bundle is set (the host phase
    loaded the image from the bundle), missing elsewhere."""
    task = yaml.safe_load((ROLE / "tasks" / "dcgm.yml").read_text())[0]["community.docker.docker_container"]
    assert task["pull"] == "{{ monitoring_dcgm_pull }}"
    default = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["monitoring_dcgm_pull"]
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    assert env.from_string(default).render(a800_offline_bundle="/srv/a800-bundle") == "never"
    assert env.from_string(default).render(a800_offline_bundle="") == "missing"


def fleet_md(hosts: list[dict]) -> str:
    """reports/fleet.md as the verify playbook writes it (its copy task's content, rendered by Jinja)."""
    plays = yaml.safe_load((ROOT / "playbooks" / "verify.yml").read_text())
    task = next(t for t in plays[1]["tasks"] if t["name"] == "Write reports/fleet.md")
    return jinja2.Environment().from_string(task["ansible.builtin.copy"]["content"]).render(__ran=hosts)


def test_a_missing_exporter_is_a_warning_and_the_host_stays_green_in_verify_and_the_fleet():
    from plugins.filter.verify_report import verify_monitoring_checks, verify_summary

    watched = {"prometheus_url": "http://gw:9090", "up": "1", "rules_loaded": 14, "rules_expected": 14, "firing": [],
               "dashboard": "gw:/d.json", "dcgm_expected": True, "dcgm_container": "a800-dcgm-exporter"}  # fmt: skip
    hosts = []
    for name, dcgm_up in (("gpu-1", "1"), ("gpu-2", "0"), ("gpu-3", None)):
        checks = verify_monitoring_checks(dict(watched, dcgm_up=dcgm_up), name)
        (dcgm,) = [c for c in checks if c["name"] == "monitoring:dcgm"]
        if dcgm_up == "1":
            assert dcgm["status"] == "pass"
        else:
            assert dcgm["status"] == "warn", dcgm
            assert "dcgm-exporter (a800-dcgm-exporter) is not scraped" in dcgm["detail"]
            assert f'up{{job="dcgm",host="{name}"}} is {dcgm_up or "absent"}' in dcgm["detail"]
            assert "docker logs a800-dcgm-exporter" in dcgm["fix"] and "monitoring_dcgm_enabled: false" in dcgm["fix"]
        summary = verify_summary(checks)
        assert summary["ok"] is True and summary["fail"] == 0
        hosts.append({"inventory_hostname": name, "verify_result": {"summary": summary}})
    rows = [line for line in fleet_md(hosts).splitlines() if line.startswith("| gpu-")]
    assert rows == ["| gpu-1 | PASS | 4 | 0 | 0 |", "| gpu-2 | PASS | 3 | 1 | 0 |", "| gpu-3 | PASS | 3 | 1 | 0 |"]


def test_a_host_without_the_exporter_gets_no_dcgm_check():
    from plugins.filter.verify_report import verify_monitoring_checks

    base = {"prometheus_url": "http://gw:9090", "up": "1", "rules_loaded": 14, "rules_expected": 14, "firing": []}
    for expected in (False, "False", None):
        names = [c["name"] for c in verify_monitoring_checks(dict(base, dcgm_expected=expected, dcgm_up=None), "h")]
        assert "monitoring:dcgm" not in names


# --- the start's ledger as metrics (the serve role's textfile) ----------------------------------------------------


def test_the_start_ledger_is_exposition_format_promtool_accepts():
    ledger = {
        "phases": [
            {"phase": "model_loading", "label": "model loading (weights)", "s": 352.0},
            {"phase": "cuda_graphs", "label": "CUDA graph capture", "s": 66.5},
        ],
        "total_s": 441.0,
    }
    text = start_metrics(ledger, "glm52-nvfp4")
    assert 'a800_vllm_start_phase_seconds{container="glm52-nvfp4",phase="cuda_graphs"} 66.5' in text.splitlines()
    assert 'a800_vllm_start_seconds{container="glm52-nvfp4"} 441' in text.splitlines()
    lint = subprocess.run(
        [tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    # a start still running: its phases so far, no total
    assert "a800_vllm_start_seconds" not in start_metrics(dict(ledger, total_s=None), "glm52-nvfp4")
