"""Who holds a configured port (plugins/filter/ports.py): `ss -H -ltnp` and `docker ps` lines recorded on the CI
machine (tests/fixtures/ports/README.md), judged as the preflight judges serve_port."""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.a800.vllm.plugins.filter.ports import port_holders_check, published_ports, ss_listeners
from conftest import ROOT

FIXTURES = ROOT / "tests/fixtures/ports"
SS = (FIXTURES / "ss-ltnp.txt").read_text()
PS = (FIXTURES / "docker-ps.txt").read_text()


def test_ss_lines_are_read_with_every_process_of_a_socket():
    by_port = {entry["port"]: entry for entry in ss_listeners(SS)}
    assert by_port[8002]["local"] == "127.0.0.1:8002"
    assert by_port[8002]["processes"] == [{"name": "python3", "pid": 2262}]
    assert by_port[8004]["local"] == "*:8004"
    assert [p["pid"] for p in by_port[8005]["processes"]] == [3263, 3262]
    assert by_port[2024]["processes"] == []


def test_docker_ps_ports_are_read_with_ranges():
    ports = published_ports(PS)
    assert [p for p, _ in ports["glm52-nvfp4"]] == [8001]
    assert sorted({p for p, _ in ports["ranged"]}) == [8006, 8007]
    assert ports["dcgm-exporter"] == []


@pytest.mark.parametrize(
    ("port", "holders", "fix"),
    [
        (8002, ["process python3 (pid 2262, 127.0.0.1:8002)"], "stop the process (kill 2262)"),
        (8003, ["container other-vllm (0.0.0.0:8003->8003/tcp, [::]:8003->8003/tcp)"], "docker stop other-vllm"),
        (8004, ["process python3 (pid 2262, *:8004)"], "kill 2262"),
        (8005, ["process python3 (pid 3263, 0.0.0.0:8005)", "process python3 (pid 3262, 0.0.0.0:8005)"],
         "kill 3263 3262"),
        (8006, ["container ranged (0.0.0.0:8006-8007->9000-9001/tcp, [::]:8006-8007->9000-9001/tcp)"],
         "docker stop ranged"),
        (2024, ["a process ss does not name (0.0.0.0:2024; run the preflight as root)"],
         "set serve_port to a free port"),
    ],
    ids=["process", "other-container", "ipv6-any", "shared-socket", "published-range", "unnamed"],
)  # fmt: skip
def test_a_held_port_names_the_container_or_the_process_and_pid(port, holders, fix):
    record = port_holders_check(port, "glm52-nvfp4", SS, 0, PS, 0)
    assert record["name"] == "port_free" and record["status"] == "fail", record
    assert record["measured"] == holders
    assert record["detail"] == f"port {port} is held by " + ", ".join(holders)
    assert fix in record["fix"] and "set serve_port to a free port" in record["fix"]


def test_our_own_container_holding_the_port_is_no_conflict():
    record = port_holders_check(8001, "glm52-nvfp4", SS, 0, PS, 0)
    assert record["status"] == "pass" and record["detail"] == "port 8001 is held by our container glm52-nvfp4"


def test_a_free_port_passes():
    assert port_holders_check(8009, "glm52-nvfp4", SS, 0, PS, 0)["status"] == "pass"


def test_a_published_port_without_docker_ps_names_the_proxy_process():
    record = port_holders_check(8001, "glm52-nvfp4", SS, 0, "", 127)
    assert record["status"] == "fail" and record["measured"] == ["process docker-proxy (pid 9836, 127.0.0.1:8001)"]


def test_without_ss_the_rule_is_pending():
    record = port_holders_check(8001, "glm52-nvfp4", "[Errno 2] No such file or directory: b'ss'", 2)
    assert record["status"] == "pending" and "ss could not be run" in record["detail"]


def test_the_preflight_calls_ss_once_and_judges_serve_port():
    """ss with the processes, written once (the serve role's vars), read with the image right after the preflight's
    system check (tasks/argcheck.yml), and by tasks/preflight.yml itself only where that read did not run."""
    role = ROOT / "roles/serve"
    argv = yaml.safe_load((role / "vars/main.yml").read_text())["__serve_ports_argv"]
    assert argv["listeners"] == ["ss", "-H", "-ltnp"]
    assert sum(path.read_text().count("[ss,") for path in role.rglob("*.yml")) == 1
    argcheck = [t for t in yaml.safe_load((role / "tasks/argcheck.yml").read_text()) if "a800.vllm.host_read" in t]
    assert len(argcheck) == 1 and "__serve_ports_argv" in argcheck[0]["a800.vllm.host_read"]["commands"]
    text = (role / "tasks/preflight.yml").read_text()
    reads = [t for t in yaml.safe_load(text) if "a800.vllm.host_read" in t]
    assert [(t["a800.vllm.host_read"]["commands"], t["when"]) for t in reads] == [
        ("{{ __serve_ports_argv }}", "__serve_preflight_read is not defined")
    ]
    assert "serve_port | a800.vllm.port_holders_check(serve_container_name" in text
