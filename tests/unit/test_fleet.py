"""The fleet role's checks of the inventory (keys, limits, workers) and its reading of a server's requests in flight.

Each bad input must be refused by name - the variable, the entry's id (never its key) and the fix - before nginx or
the router is reloaded; the rendered gateway must hold every key only in its key maps.
"""

from __future__ import annotations

import jinja2
import pytest
from ansible_collections.a800.vllm.plugins.filter.fleet import (
    fleet_key_errors,
    fleet_keys,
    fleet_missing_workers,
    fleet_worker_errors,
    fleet_workers,
    vllm_requests_in_flight,
)
from ansible_collections.a800.vllm.plugins.module_utils.bench_fleet import compare, markdown, spread
from conftest import ROOT

KEY_A = "sk-team-a-0123456789abcdef"
KEY_B = "sk-team-b-0123456789abcdef"
DEFAULTS = {"requests_per_minute": 600, "burst": 100, "concurrency": 32}


def team(ident: str = "team-a", key: str = KEY_A, **limits) -> dict:
    return {"id": ident, "key": key, **limits}


def test_good_keys_pass_and_take_the_default_limits():
    keys = [team(), team("team-b", KEY_B, requests_per_minute="60", concurrency=4)]
    assert fleet_key_errors(keys, DEFAULTS) == []
    assert fleet_keys(keys, DEFAULTS) == [
        {"id": "team-a", "key": KEY_A, "requests_per_minute": 600, "burst": 100, "concurrency": 32},
        {"id": "team-b", "key": KEY_B, "requests_per_minute": 60, "burst": 100, "concurrency": 4},
    ]


@pytest.mark.parametrize(
    ("keys", "says"),
    [
        ([], "fleet_gateway_keys is empty or not a list: a gateway without a key refuses every request"),
        ({"team-a": KEY_A}, "fleet_gateway_keys is empty or not a list"),
        ([team(), team("team-b", KEY_A)], "fleet_gateway_keys[1] (id team-b): key is the same as entry 0 (team-a)'s"),
        ([team(), team("team-a", KEY_B)], "fleet_gateway_keys[1] (id team-a): the id is also entry 0's"),
        ([team(key="")], "fleet_gateway_keys[0] (id team-a): key is empty"),
        ([team(key=None)], "fleet_gateway_keys[0] (id team-a): key is empty"),
        ([team(key=KEY_A + " ")], "key has whitespace around it (a copy-paste)"),
        ([team(key='"' + KEY_A + '"')], "key has characters a bearer token cannot hold (RFC 6750"),
        ([team(key="sk-short")], "key is shorter than 20 characters"),
        ([team(ident="team a")], "fleet_gateway_keys[0]: id 'team a' is missing or not 1-64 letters"),
        ([{"key": KEY_A}], "fleet_gateway_keys[0]: id None is missing"),
        ([team(requests_per_minute="10r/s")], "requests_per_minute is '10r/s', not a whole number >= 1"),
        ([team(burst="fast")], "(id team-a): burst is 'fast', not a whole number >= 1"),
        ([team(concurrency=0)], "concurrency is 0, not a whole number >= 1 of requests in flight at once"),
        ([team(concurrency=2.5)], "concurrency is 2.5, not a whole number"),
        ([team(concurrency=True)], "concurrency is True, not a whole number"),
        ([team(rate=5)], "(id team-a): unknown field(s) rate; known: burst, concurrency, description, id, key"),
        (["sk-team-a"], "fleet_gateway_keys[0] is not a mapping"),
    ],
)
def test_bad_keys_are_refused_by_name_and_the_key_is_never_shown(keys, says):
    errors = fleet_key_errors(keys, DEFAULTS)
    assert any(says in e for e in errors), errors
    for error in errors:
        assert KEY_A not in error and KEY_B not in error


def test_a_limit_missing_everywhere_and_a_bad_default_are_named():
    assert "fleet_gateway_keys[0] (id team-a): burst is not set" in " ".join(
        fleet_key_errors([team()], {"requests_per_minute": 600, "concurrency": 4})
    )
    assert "fleet_gateway_default_limits.burst is 'x'" in " ".join(
        fleet_key_errors([team()], {**DEFAULTS, "burst": "x"})
    )


HOSTVARS = {
    "gpu-1": {"ansible_host": "10.0.0.11", "serve_port": 8001, "serve_publish_address": "0.0.0.0"},
    "gpu-2": {"ansible_host": "10.0.0.12", "serve_port": 8001, "serve_publish_address": "0.0.0.0"},
}


def test_workers_come_from_the_serving_hosts():
    workers = fleet_workers(["gpu-1", "gpu-2", "gpu-3"], {**HOSTVARS, "gpu-3": {"fleet_worker_address": "gpu-3.lan"}})
    assert [w["url"] for w in workers] == ["http://10.0.0.11:8001", "http://10.0.0.12:8001", "http://gpu-3.lan:8001"]
    assert fleet_worker_errors(workers[:2], HOSTVARS, ["gw-1"]) == []


def test_two_hosts_on_one_address_and_a_loopback_publish_are_refused():
    hostvars = {**HOSTVARS, "gpu-2": {**HOSTVARS["gpu-2"], "ansible_host": "10.0.0.11"}}
    errors = fleet_worker_errors(fleet_workers(["gpu-1", "gpu-2"], hostvars), hostvars, ["gw-1"])
    assert errors == [
        "gpu-2 and gpu-1 are the same worker http://10.0.0.11:8001: the router would send both hosts' share to one; "
        "set fleet_worker_address (or ansible_host) on gpu-2 to its own address"
    ]
    hostvars = {**HOSTVARS, "gpu-1": {"ansible_host": "10.0.0.11"}}  # serve_publish_address: the role's 127.0.0.1
    (error,) = fleet_worker_errors(fleet_workers(["gpu-1", "gpu-2"], hostvars), hostvars, ["gw-1"])
    assert error.startswith("gpu-1: serve_publish_address is 127.0.0.1 (loopback), so the router on gw-1 cannot reach")
    # a gateway on the serving host itself reaches its loopback
    assert fleet_worker_errors(fleet_workers(["gpu-1"], hostvars), hostvars, ["gpu-1"]) == []
    assert "the router would have no worker" in fleet_worker_errors([], {}, ["gw-1"])[0]


def test_missing_workers_are_the_ones_the_router_does_not_list():
    workers = fleet_workers(["gpu-1", "gpu-2"], HOSTVARS)
    listed = {"urls": ["http://10.0.0.12:8001"]}
    assert [w["host"] for w in fleet_missing_workers(workers, listed)] == ["gpu-1"]
    assert len(fleet_missing_workers(workers, None)) == 2


def test_requests_in_flight_sum_running_and_waiting_and_ignore_the_by_reason_gauge():
    text = "\n".join(
        [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            'vllm:num_requests_running{engine="0",model_name="glm-5.2-nvfp4"} 3.0',
            'vllm:num_requests_running{engine="1",model_name="glm-5.2-nvfp4"} 1.0',
            'vllm:num_requests_waiting{engine="0",model_name="glm-5.2-nvfp4"} 2.0',
            'vllm:num_requests_waiting_by_reason{engine="0",model_name="glm-5.2-nvfp4",reason="capacity"} 2.0',
            'vllm:num_preemptions_total{engine="0",model_name="glm-5.2-nvfp4"} 7.0',
        ]
    )
    assert vllm_requests_in_flight(text) == 6
    assert vllm_requests_in_flight("") == 0  # a server that does not answer has nothing in flight


def render(name: str, **context) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROOT / "roles/fleet/templates"), undefined=jinja2.StrictUndefined
    )
    return env.get_template(name).render(ansible_managed="managed", **context)


def test_the_gateway_holds_each_key_only_in_its_key_maps_and_limits_each_by_its_id():
    keys = fleet_keys([team(), team("team-b", KEY_B, requests_per_minute=6, burst=2, concurrency=2)], DEFAULTS)
    conf = render(
        "a800-fleet.conf.j2",
        __fleet_keys=keys,
        fleet_router_port=30000,
        fleet_gateway_workers_conf="/etc/nginx/a800-fleet-workers.conf",
        fleet_gateway_address="0.0.0.0",
        fleet_gateway_port=8080,
        fleet_gateway_access_log="/var/log/nginx/a800-fleet-access.log",
        fleet_gateway_max_body="64m",
        fleet_gateway_read_timeout_s=900,
        fleet_gateway_routes=[
            {"path": "/v1/chat/completions", "upstream": "router"},
            {"path": "/v1/messages", "upstream": "workers"},
        ],
        fleet_upstream_api_key="sk-serving-hosts-0123456789",
    )
    for key in (KEY_A, KEY_B):
        lines = [line.strip() for line in conf.splitlines() if key in line]
        assert lines == [f'"Bearer {key}" "{"team-a" if key == KEY_A else "team-b"}";',
                         f'"{key}" "{"team-a" if key == KEY_A else "team-b"}";']  # fmt: skip
    assert "limit_req_zone $a800_limit_2 zone=a800_req_2:1m rate=6r/m;" in conf
    assert conf.count("limit_req zone=a800_req_2 burst=2 nodelay;") == 2  # both routes
    assert conf.count("limit_conn a800_conn_2 2;") == 2
    assert "location = /v1/chat/completions {" in conf and "proxy_pass http://a800_router;" in conf
    assert "proxy_pass http://a800_workers;" in conf
    assert 'proxy_set_header Authorization "Bearer sk-serving-hosts-0123456789";' in conf
    assert '"key_id":"$a800_key_id"' in conf and '$http_authorization"' not in conf.split("log_format")[1]


def test_a_drained_host_is_down_in_the_direct_upstream():
    workers = fleet_workers(["gpu-1", "gpu-2"], HOSTVARS)
    conf = render("workers.conf.j2", __fleet_workers=workers, __fleet_out=["gpu-2"])
    assert "server 10.0.0.11:8001 max_fails=2 fail_timeout=10s;  # gpu-1" in conf
    assert "server 10.0.0.12:8001 max_fails=2 fail_timeout=10s down;  # gpu-2" in conf


def test_the_streams_are_spread_over_the_hosts_round_robin():
    assert spread(1, 2) == [1, 0] and spread(4, 2) == [2, 2] and spread(16, 3) == [6, 5, 5]


def test_the_overhead_comparison_runs_both_paths_alike(launcher):
    """Two doubles: the "gateway" is the first one, "direct" both; the counts and the table's shape (no timing)."""
    first, second = launcher.start(), launcher.start()
    for server in (first, second):
        assert "Application startup complete." in server.log, server.log[-3000:]
    result = compare(first.url, "", [first.url, second.url], None, "glm-5.2-nvfp4", [1, 4], requests_per_stream=2,
                     max_tokens=8)  # fmt: skip
    assert [row["concurrency"] for row in result["levels"]] == [1, 4]
    errors = {
        f"{row['concurrency']}/{path}": row[path]["errors"]
        for row in result["levels"]
        for path in ("gateway", "direct")
    }
    assert (result["completed"], result["failed"]) == (2 * 2 * (1 + 4), 0), (
        errors,
        first.log[-1500:],
        second.log[-1500:],
    )
    assert result["levels"][1]["direct"]["completed"] == 8 and result["levels"][1]["gateway"]["completed"] == 8
    table = markdown(result)
    assert table.count("\n| ") == 3 and "| 4 | " in table  # header + two levels
