"""The fleet role's checks of the inventory (keys, limits, workers) and its reading of a server's requests in flight.

Each bad input must be refused by name - the variable, the entry's id (never its key) and the fix - before nginx or
the router is reloaded; the rendered gateway must hold every key only in its key maps.
"""

from __future__ import annotations

import base64
import http.client
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible_collections.a800.vllm.plugins.filter.fleet import (
    KEY_MAX_LEN,
    fleet_key_errors,
    fleet_keys,
    fleet_missing_workers,
    fleet_worker_errors,
    fleet_workers,
    vllm_requests_in_flight,
)
from ansible_collections.a800.vllm.plugins.module_utils.bench_fleet import compare, markdown, spread
from conftest import ROOT, VOCABULARY

KEY_A = "sk-team-a-0123456789abcdef"
KEY_B = "sk-team-b-0123456789abcdef"
DEFAULTS = {"requests_per_minute": 600, "burst": 100, "concurrency": 32}


def team(ident: str = "team-a", key: str = KEY_A, **limits) -> dict:
    return {"id": ident, "key": key, **limits}


def test_good_keys_pass_and_take_the_default_limits():
    keys = [team(), team("team-b", KEY_B, requests_per_minute="60", concurrency=4)]
    assert fleet_key_errors(keys, DEFAULTS) == []
    assert fleet_key_errors([team("t" * 64, "k" * KEY_MAX_LEN), team("u", "K" * 20)], DEFAULTS) == []
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
        ([team(key="k" * 257)], "(id team-a): key is 257 characters, longer than the 256 the gateway's nginx key map"),
        # nginx's map matches strings ignoring case: two keys or ids that differ only in case would be one
        (
            [team(), team("team-b", KEY_A.upper())],
            "fleet_gateway_keys[1] (id team-b): key differs from entry 0 (team-a)'s only in case, and nginx's map",
        ),
        (
            [team(), team("team-b", KEY_B), team("team-c", KEY_B.replace("team", "TEAM"))],
            "fleet_gateway_keys[2] (id team-c): key differs from entry 1 (team-b)'s only in case",
        ),
        (
            [team(), team("Team-A", KEY_B)],
            "fleet_gateway_keys[1] (id Team-A): the id differs from entry 0's (team-a) only in case, and nginx's map",
        ),
        ([team("TEAM-a"), team("team-A", KEY_B)], "share each other's limits; give ids that differ in more than case"),
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
    for error in errors:  # in no case either
        assert KEY_A.lower() not in error.lower() and KEY_B.lower() not in error.lower()


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
# What a host that sets neither falls back to: the vocabulary's (roles/a800), as the fleet role passes it.
PORT, PUBLISH = VOCABULARY["a800_serve_port"], VOCABULARY["a800_serve_publish_address"]


def test_workers_come_from_the_serving_hosts():
    workers = fleet_workers(
        ["gpu-1", "gpu-2", "gpu-3"], {**HOSTVARS, "gpu-3": {"fleet_worker_address": "gpu-3.lan"}}, PORT
    )
    assert [w["url"] for w in workers] == ["http://10.0.0.11:8001", "http://10.0.0.12:8001", "http://gpu-3.lan:8001"]
    assert fleet_worker_errors(workers[:2], HOSTVARS, ["gw-1"], PUBLISH) == []


def test_two_hosts_on_one_address_and_a_loopback_publish_are_refused():
    hostvars = {**HOSTVARS, "gpu-2": {**HOSTVARS["gpu-2"], "ansible_host": "10.0.0.11"}}
    errors = fleet_worker_errors(fleet_workers(["gpu-1", "gpu-2"], hostvars, PORT), hostvars, ["gw-1"], PUBLISH)
    assert errors == [
        "gpu-2 and gpu-1 are the same worker http://10.0.0.11:8001: the router would send both hosts' share to one; "
        "set fleet_worker_address (or ansible_host) on gpu-2 to its own address"
    ]
    hostvars = {**HOSTVARS, "gpu-1": {"ansible_host": "10.0.0.11"}}  # serve_publish_address: the role's 127.0.0.1
    (error,) = fleet_worker_errors(fleet_workers(["gpu-1", "gpu-2"], hostvars, PORT), hostvars, ["gw-1"], PUBLISH)
    assert error.startswith("gpu-1: serve_publish_address is 127.0.0.1 (loopback), so the router on gw-1 cannot reach")
    # a gateway on the serving host itself reaches its loopback
    assert fleet_worker_errors(fleet_workers(["gpu-1"], hostvars, PORT), hostvars, ["gpu-1"], PUBLISH) == []
    assert "the router would have no worker" in fleet_worker_errors([], {}, ["gw-1"], PUBLISH)[0]


def test_missing_workers_are_the_ones_the_router_does_not_list():
    workers = fleet_workers(["gpu-1", "gpu-2"], HOSTVARS, PORT)
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


def gateway_vars(keys: list[dict], **overrides) -> dict:
    """The variables of the gateway's template, as the role's defaults give them."""
    return {
        "__fleet_keys": keys,
        "fleet_router_port": 30000,
        "fleet_gateway_workers_conf": "/etc/nginx/a800-fleet-workers.conf",
        "fleet_gateway_address": "0.0.0.0",
        "fleet_gateway_port": 8080,
        "fleet_gateway_access_log": "/var/log/nginx/a800-fleet-access.log",
        "fleet_gateway_max_body": "64m",
        "fleet_gateway_read_timeout_s": 1800,
        "fleet_gateway_routes": [
            {"path": "/v1/chat/completions", "upstream": "router"},
            {"path": "/v1/messages", "upstream": "workers"},
        ],
        "fleet_upstream_api_key": "sk-serving-hosts-0123456789",
        **overrides,
    }


def test_the_gateway_holds_each_key_only_in_its_key_maps_and_limits_each_by_its_id():
    keys = fleet_keys([team(), team("team-b", KEY_B, requests_per_minute=6, burst=2, concurrency=2)], DEFAULTS)
    conf = render("a800-fleet.conf.j2", **gateway_vars(keys))
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


# --- the gateway under the real nginx (Debian's binary, unpacked into .tools/ by tests/testbed/install-deps.sh) ------

NGINX = ROOT / ".tools" / "nginx" / "bin" / "nginx"


def nginx() -> str:
    found = NGINX if NGINX.exists() else shutil.which("nginx", path=f"{os.environ.get('PATH', '')}:/usr/sbin")
    assert found, f"{NGINX} is missing: run tests/testbed/install-deps.sh (make deps)"
    return str(found)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gateway_files(tmp_path: Path, keys: list[dict], **overrides) -> Path:
    """The gateway's two nginx files as the role writes them, inside a main configuration like the role's validate
    (events{}, http{ include }) whose paths all lie in tmp_path, so that nginx -t and nginx run unprivileged."""
    workers = tmp_path / "a800-fleet-workers.conf"
    workers.write_text(render("workers.conf.j2", __fleet_workers=fleet_workers(["gpu-1", "gpu-2"], HOSTVARS, PORT)))
    gateway = tmp_path / "a800-fleet.conf"
    gateway.write_text(
        render(
            "a800-fleet.conf.j2",
            **gateway_vars(
                fleet_keys(keys, DEFAULTS),
                fleet_gateway_workers_conf=str(workers),
                fleet_gateway_access_log=str(tmp_path / "access.log"),
                **overrides,
            ),
        )
    )
    temp = "\n".join(
        f"    {kind}_temp_path {tmp_path / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    main = tmp_path / "nginx.conf"
    main.write_text(
        f"pid {tmp_path / 'nginx.pid'};\nerror_log stderr;\nevents {{}}\n"
        f"http {{\n{temp}\n    access_log off;\n    include {gateway};\n}}\n"
    )
    return main


def nginx_test(main: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [nginx(), "-t", "-p", str(main.parent), "-c", str(main), "-e", "stderr"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def longest_keys() -> list[dict]:
    """Keys as the README makes them (`openssl rand -hex 24`), with ids of the longest length allowed (64), the
    longest key the validation accepts (every character kind of RFC 6750, "=" padding), a key that starts with "~"
    and the ids "default" and "include" (map's own words)."""
    keys = [team(f"team-{i}-".ljust(64, "x"), secrets.token_hex(24)) for i in range(6)]
    longest = base64.b64encode(secrets.token_bytes(190)).decode()  # 256 characters ending in "=="
    assert len(longest) == KEY_MAX_LEN and longest.endswith("==")
    keys.append(team("longest-key".ljust(64, "k"), longest))
    keys.append(team("default", "~" + secrets.token_hex(24)))
    keys.append(team("include", "-._~+/" + secrets.token_hex(24)))
    return keys


def test_the_map_hash_holds_the_longest_key_and_id_the_validation_accepts():
    """nginx's arithmetic (ngx_hash_init, src/core/ngx_hash.c): every key takes sizeof(void *) +
    align(len + 2, sizeof(void *)) bytes of its bucket, which ends with one more pointer. The 64-bit case is the
    largest; the template's map_hash_bucket_size must hold the longest bearer string and the longest id."""
    conf = render("a800-fleet.conf.j2", **gateway_vars(fleet_keys([team()], DEFAULTS)))
    bucket = int(re.search(r"^map_hash_bucket_size (\d+);$", conf, re.M).group(1))
    assert conf.index("map_hash_bucket_size") < conf.index("\nmap ")  # nginx reads it at each map

    def needs(length: int, pointer: int = 8) -> int:
        return pointer + -(-(length + 2) // pointer) * pointer + pointer

    assert needs(len("Bearer ") + KEY_MAX_LEN) == 288 <= bucket and needs(64) <= bucket
    assert bucket % 128 == 0  # nginx rounds it up to a multiple of the cache line (32, 64 or 128 bytes)
    assert needs(len("Bearer ") + 40) > 64 >= needs(len("Bearer ") + 39)  # nginx's default bucket: 64 bytes
    assert fleet_key_errors([team(key="k" * (KEY_MAX_LEN + 1))], DEFAULTS)


def test_nginx_accepts_the_gateway_with_the_longest_keys_and_ids(tmp_path):
    keys = longest_keys()
    assert fleet_key_errors(keys, DEFAULTS) == []
    result = nginx_test(gateway_files(tmp_path, keys))
    assert result.returncode == 0, result.stderr
    assert "test is successful" in result.stderr and "could not build" not in result.stderr, result.stderr


def status(port: int, headers: dict[str, str]) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", "/v1/chat/completions", body="{}", headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


def test_the_running_gateway_matches_keys_as_nginx_documents(tmp_path):
    """The keys in nginx itself: a known key passes the 401 and reaches the router, which is not listening here
    (502); nginx's map ignores case, and a key starting with "~" is matched as itself, not as a regular expression."""
    keys = longest_keys()
    port = free_port()
    main = gateway_files(tmp_path, keys, fleet_gateway_address="127.0.0.1", fleet_gateway_port=port,
                         fleet_router_port=free_port())  # fmt: skip
    log = (tmp_path / "nginx.log").open("w")
    server = subprocess.Popen(
        [nginx(), "-p", str(tmp_path), "-c", str(main), "-e", "stderr", "-g", "daemon off; master_process off;"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 15
        while True:
            assert server.poll() is None, (tmp_path / "nginx.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "nginx.log").read_text()
                time.sleep(0.1)
        hexkey, longest, tilde = keys[0]["key"], keys[6]["key"], keys[7]["key"]
        assert status(port, {"Authorization": f"Bearer {hexkey}"}) == 502
        assert status(port, {"Authorization": f"Bearer {longest}"}) == 502
        assert status(port, {"x-api-key": longest}) == 502
        assert status(port, {"Authorization": f"Bearer {hexkey.upper()}"}) == 502  # "matched ignoring the case"
        assert status(port, {"Authorization": f"bearer {hexkey}"}) == 502
        assert status(port, {"x-api-key": tilde}) == 502
        assert status(port, {"x-api-key": "zz" + tilde[1:]}) == 401  # as a regular expression, "~<hex>" would match
        assert status(port, {"Authorization": f"Bearer {secrets.token_hex(24)}"}) == 401
        assert status(port, {}) == 401
        ids = [line.split('"key_id":"')[1].split('"')[0] for line in (tmp_path / "access.log").read_text().splitlines()]
        assert ids[:6] == [keys[0]["id"], keys[6]["id"], keys[6]["id"], keys[0]["id"], keys[0]["id"], "default"], ids
    finally:
        server.terminate()
        server.wait(timeout=15)
        log.close()


def test_a_drained_host_is_down_in_the_direct_upstream():
    workers = fleet_workers(["gpu-1", "gpu-2"], HOSTVARS, PORT)
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


def test_the_gateway_and_the_router_give_a_request_the_same_time():
    """nginx's proxy_read_timeout and vllm-router's --request-timeout-secs come from one variable, the role's default
    (1800 s, the router's own default): nginx under the router gave a long non-streamed answer a 504 while the
    router and the engine went on computing it."""

    defaults = yaml.safe_load((ROOT / "roles/fleet/defaults/main.yml").read_text())
    timeout = defaults["fleet_gateway_read_timeout_s"]
    conf = render(
        "a800-fleet.conf.j2", **gateway_vars(fleet_keys([team()], DEFAULTS), fleet_gateway_read_timeout_s=timeout)
    )
    unit = render(
        "vllm-router.service.j2",
        fleet_router_version="0.1.17", fleet_serving_group="a800_servers", fleet_router_venv="/opt/r",
        fleet_router_port=30000, fleet_metrics_address="0.0.0.0", fleet_router_metrics_port=29000,
        fleet_router_policy="round_robin", fleet_router_health_check_interval_s=10, fleet_router_extra_args=[],
        fleet_gateway_read_timeout_s=timeout, __fleet_workers=[{"url": "http://gpu-1:8001"}],
    )  # fmt: skip
    nginx = {int(v) for v in re.findall(r"proxy_read_timeout (\d+)s;", conf)}
    router = [int(v) for v in re.findall(r"--request-timeout-secs (\d+)", unit)]
    assert nginx == {timeout} and router == [timeout] and timeout >= 1800, (nginx, router)


def test_the_gateways_metrics_come_after_it_serves_and_never_stop_it():
    """mtail and the keys' limits are set up after nginx and the router started and their handlers ran, in a block
    whose rescue names the failure: a monitoring failure leaves a serving gateway."""

    tasks = yaml.safe_load((ROOT / "roles/fleet/tasks/main.yml").read_text())
    names = [t["name"] for t in tasks]
    metrics = next(i for i, t in enumerate(tasks) if "block" in t and "metrics.yml" in str(t["block"]))
    assert metrics == len(tasks) - 1, names  # last
    started = names.index("Start the router and nginx now, and at every boot")
    flushed = next(i for i, t in enumerate(tasks) if t.get("ansible.builtin.meta") == "flush_handlers")
    assert started < flushed < metrics, names
    rescue = tasks[metrics]["rescue"]
    assert [list(step)[1] for step in rescue] == ["ansible.builtin.debug"], rescue
    assert "serve without them" in rescue[0]["ansible.builtin.debug"]["msg"]
    assert not any("metrics.yml" in str(t) for t in tasks[:metrics])
    # no handler restarts mtail behind the rescue's back: the last task of metrics.yml does
    handlers = yaml.safe_load((ROOT / "roles/fleet/handlers/main.yml").read_text())
    assert "mtail" not in str(handlers)
    last = yaml.safe_load((ROOT / "roles/fleet/tasks/metrics.yml").read_text())[-1]
    assert last["ansible.builtin.systemd_service"]["name"] == "mtail.service"
