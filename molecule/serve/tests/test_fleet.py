"""The fleet's one endpoint: vllm-router and the nginx key gateway on the gateway host, in front of both serving hosts.

First in file order (right after converge): the router holds both hosts; a team key is answered, a wrong key is
401 with no upstream call, a key over its limit gets 429, a route outside the allowlist 404; the access log counts
each key's requests by its id and never holds a key; then a canary upgrade (playbooks/upgrade.yml: the canary first,
judged, promoted, then the rest rolling as the serve phase does) under a bounded load through the gateway fails no
request, cuts no stream short and never has more than one host out of the router.

Traffic goes only to the test bed's own containers (the scenario's Docker network), bounded in count and time.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from test_serve import (
    FLEET,
    H1,
    H2,
    ROOT,
    SERVE_KEY,
    SIM_VARS,
    STATE,
    config_hash,
    http,
    only_once,
    playbook,
    said,
    started,
    ts,
)

testinfra_hosts = ["a800_servers"]

GW = "a800-mol-serve-gw"
NETWORK = "a800-mol-serve"
KEYS = {k["id"]: k["key"] for k in FLEET["a800_gateways"]["vars"]["fleet_gateway_keys"]}
MODEL = "glm-5.2-nvfp4"
ACCESS_LOG = "/var/log/nginx/a800-fleet-access.log"
WORKERS = {f"http://{h}:8001" for h in (H1, H2)}


def gw(*cmd: str) -> str:
    return subprocess.run(["docker", "exec", GW, *cmd], capture_output=True, text=True, check=True, timeout=60).stdout


def base() -> str:
    fmt = '{{(index .NetworkSettings.Networks "' + NETWORK + '").IPAddress}}'
    address = subprocess.run(["docker", "inspect", "-f", fmt, GW], capture_output=True, text=True, check=True)
    return f"http://{address.stdout.strip()}:8080"


def call(
    path: str, key: str | None, body: dict | None = None, header: str = "Authorization", url: str | None = None
) -> tuple[int, str, dict]:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers[header] = f"Bearer {key}" if header == "Authorization" else key
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        (url or base()) + path, data=data, headers=headers, method="POST" if data else "GET"
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, answer.read().decode(), dict(answer.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), dict(error.headers)


def chat(key: str, *, stream: bool = False) -> tuple[int, str, dict]:
    """The article's smoke question; streamed, a long answer (300 tokens, ignore_eos: a few seconds each), so that a
    host leaving the router has requests in flight to drain."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "What is 17 multiplied by 24? Answer briefly."}],
            "max_tokens": 300 if stream else 150, "stream": stream, "ignore_eos": stream}  # fmt: skip
    return call("/v1/chat/completions", key, body)


def access_log() -> list[dict]:
    return [json.loads(line) for line in gw("cat", ACCESS_LOG).splitlines() if line.strip()]


def router_workers() -> set[str]:
    return set(json.loads(gw("curl", "-s", "http://127.0.0.1:30000/list_workers"))["urls"])


def router_requests() -> float:
    """vllm_router_requests_total summed over routes: what the router was asked."""
    text = gw("curl", "-s", "http://127.0.0.1:29000/metrics")
    lines = [line for line in text.splitlines() if line.startswith("vllm_router_requests_total")]
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)


def test_the_router_and_the_gateway_run_with_both_serving_hosts(host):
    only_once(host)
    assert gw("systemctl", "is-active", "a800-vllm-router.service", "nginx.service").split() == ["active", "active"]
    assert router_workers() == WORKERS
    assert gw("stat", "-c", "%a %U", "/etc/nginx/conf.d/a800-fleet.conf").split() == ["600", "root"]
    unit = gw("systemctl", "cat", "a800-vllm-router.service")
    assert "--policy round_robin" in unit and "--host 127.0.0.1" in unit
    assert gw(f"{'/opt/a800-fleet/vllm-router'}/bin/pip", "show", "vllm-router").split("\n")[1] == "Version: 0.1.17"


def test_the_router_venv_holds_exactly_the_constrained_set_and_packaging_comes_from_the_distribution(host):
    """The bed's gateway came without packaging or pkg_resources (sim_host.bare_python): the role installed the
    distribution's python3-packaging for the pip module, and the router's venv holds exactly the constraints' pins
    for the gateway's Python, nothing unpinned."""
    only_once(host)
    status = gw("dpkg-query", "-W", "-f=${Status}", "python3-packaging")
    assert status == "install ok installed"
    pinned = gw("cat", "/opt/a800-fleet/vllm-router-constraints.txt").split()
    assert "vllm-router==0.1.17" in pinned
    frozen = gw("/opt/a800-fleet/vllm-router/bin/pip", "freeze", "--disable-pip-version-check").split()

    def norm(lines: list[str]) -> set[str]:
        return {re.sub(r"[-_.]+", "-", line.split("==")[0]).lower() + "==" + line.split("==")[1] for line in lines}

    assert norm(frozen) == norm(pinned)


def test_a_team_key_is_answered_through_both_apis(host):
    only_once(host)
    status, body, _ = chat(KEYS["team-load"])
    assert status == 200 and "408" in json.loads(body)["choices"][0]["message"]["content"]
    status, body, _ = call("/v1/models", KEYS["team-load"])
    assert status == 200 and json.loads(body)["data"][0]["id"] == MODEL
    # Anthropic's form (x-api-key), on the route nginx sends to the serving hosts itself
    question = [{"role": "user", "content": "What is 17 multiplied by 24?"}]
    messages = {"model": MODEL, "max_tokens": 150, "messages": question}
    status, body, _ = call("/v1/messages", KEYS["team-load"], messages, header="x-api-key")
    assert status == 200 and "408" in body


@pytest.mark.parametrize("key", [None, "sk-not-a-team-key-0123456789", SERVE_KEY])
def test_a_wrong_key_is_401_with_no_upstream_call(host, key):
    only_once(host)
    before = router_requests()
    status, body, _ = chat(key)
    assert status == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"
    last = access_log()[-1]
    assert (last["status"], last["key_id"], last["upstream"]) == (401, "", "")
    assert router_requests() == before


def test_a_key_over_its_limit_gets_429_with_retry_after(host):
    only_once(host)
    # 6 r/m with burst 2 (nodelay): nginx lets the first and the two of the burst through, and refuses every other
    # request until 10 s have passed (one request per 10 s); six local requests take milliseconds, once the
    # gateway's address is read (not once per request: a `docker inspect` each took seconds under load).
    url = base()
    began = time.monotonic()
    answers = [call("/v1/models", KEYS["team-small"], url=url) for _ in range(6)]
    span = time.monotonic() - began
    statuses = [a[0] for a in answers]
    assert span < 10, f"the six requests took {span:.1f} s, past the limit's 10 s: {statuses}"
    assert statuses == [200, 200, 200, 429, 429, 429], statuses
    refused = next(a for a in answers if a[0] == 429)
    assert refused[2].get("Retry-After") == "1" and json.loads(refused[1])["error"]["type"] == "rate_limit_error"


@pytest.mark.parametrize("path", ["/tokenize", "/metrics", "/load", "/v1/embeddings", "/v1/chat/completions/x"])
def test_a_route_outside_the_allowlist_is_404_and_goes_nowhere(host, path):
    only_once(host)
    status, body, _ = call(path, KEYS["team-load"], {"prompt": "x"})
    assert status == 404 and "Not an API route of this gateway" in body
    assert access_log()[-1]["upstream"] == ""


def test_usage_per_key_in_the_access_log_equals_the_requests_sent(host):
    only_once(host)
    before = sum(1 for line in access_log() if line["key_id"] == "team-load")
    for _ in range(7):
        assert chat(KEYS["team-load"])[0] == 200
    log = gw("cat", ACCESS_LOG)
    assert sum(1 for line in access_log() if line["key_id"] == "team-load") - before == 7
    for key in (*KEYS.values(), SERVE_KEY):
        assert key not in log


def test_the_gateway_phase_smokes_through_the_fleet_gateway_with_a_team_key(host):
    """The gateway role's client files and smoke (both APIs, and this fleet's own counters moved) aimed at the
    fleet's gateway, with a team key."""
    only_once(host)
    settings = {"gateway_enabled": True, "gateway_base_url": base(), "gateway_api_key": KEYS["team-load"]}
    run = playbook("-e", json.dumps(settings), playbook="playbooks/gateway.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    smoke = json.loads((ROOT / "reports/gateway/smoke.json").read_text())
    assert {c["name"]: c["status"] for c in smoke["checks"]}["fleet_answered"] == "pass", smoke["checks"]
    assert KEYS["team-load"] not in run.stdout + run.stderr


def test_the_bench_phase_measures_the_gateway_against_direct(host):
    """playbooks/bench.yml with fleet_bench_enabled: the overhead table (figures printed, not judged)."""
    only_once(host)
    run = playbook("-e", "fleet_bench_enabled=true", playbook="playbooks/bench.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    result = json.loads((ROOT / "reports/fleet-bench.json").read_text())
    assert [row["concurrency"] for row in result["levels"]] == [1, 4, 16]
    assert result["failed"] == 0 and result["completed"] == 2 * 2 * (1 + 4 + 16)  # 2 per stream, both paths
    print("\n" + (ROOT / "reports/fleet-bench.md").read_text())


class Load:
    """A bounded load through the gateway: `streams` callers in a loop, at most `limit` requests and `seconds`."""

    def __init__(self, streams: int = 4, limit: int = 3000, seconds: float = 600) -> None:
        self.streams, self.limit, self.deadline = streams, limit, time.monotonic() + seconds
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.sent = self.streams_sent = self.truncated = 0
        self.failed: list[str] = []
        self.failed_began: list[float] = []  # time.monotonic() at which each failed request was sent
        self.ok_began: list[float] = []
        self.threads = [threading.Thread(target=self.caller, args=(i,)) for i in range(streams)]

    def caller(self, index: int) -> None:
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            with self.lock:
                if self.sent >= self.limit:
                    return
                self.sent += 1
            began = time.monotonic()
            try:
                status, body, _ = chat(KEYS["team-load"], stream=index % 2 == 1)
                # A stream that a stop aborted still ends with [DONE] (vLLM: finish_reason "abort"): not whole.
                whole = "[DONE]" in body and not re.search(r'"finish_reason": ?"abort"', body)
                ok = status == 200 and (whole if index % 2 else "408" in body)
            except Exception as error:  # any error is a failed request (a stream cut short: IncompleteRead)
                status, body, ok, whole = 0, repr(error), False, False
            with self.lock:
                if index % 2:
                    self.streams_sent += 1
                    self.truncated += (status == 200 and not whole) or "IncompleteRead" in body  # cut short
                if not ok:
                    self.failed.append(f"{status} {body[:200]}")
                    self.failed_began.append(began)
                else:
                    self.ok_began.append(began)

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=180)


# The canary's load for the verdict: shorter than the default's 16 streams (CI's two CPUs, with the steady load below
# running too). The limits are wide on purpose: here the figures of both releases are taken under that steady load at
# different moments, so only the path is under test (promotion, the drains, the rest rolling); the limits themselves
# are held where the load is alone (molecule/default/tests/test_upgrade.py, a 2x slower release) and in
# tests/unit/test_canary.py.
CANARY_LOAD = {"concurrency": [4], "ttft_prompt_tokens": [960], "long_context": {"enabled": False}}
CANARY_RULES = {"max_ttft_ratio": 20, "min_decode_ratio": 0.05}
# The upgrade's reports (reports/upgrade.md among them) go here: the default scenario's upgrades, side by side in CI,
# write their own upgrade.md.
CANARY_REPORTS = tempfile.mkdtemp(prefix="a800-upgrade-serve-")


def test_a_canary_upgrade_under_load_is_promoted_and_fails_or_truncates_no_stream(host):
    """playbooks/upgrade.yml on the fleet, under a steady load through nginx and the router: host 1 (the canary) is
    drained, restarted, verified, benchmarked beside host 2 (still on the old release) and promoted; host 2 then rolls
    as the serve phase does. Never more than one host out of the router, each rejoins verified, no request fails and
    no stream is cut short."""
    only_once(host)
    hashes = {h: config_hash(h) for h in (H1, H2)}
    out_of_router: list[int] = []
    sampling = threading.Event()

    def sample() -> None:
        for _ in range(1800):  # at most 15 minutes of samples
            if sampling.is_set():
                return
            out_of_router.append(len(WORKERS - router_workers()))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample)
    began = time.monotonic()
    with Load() as load:
        time.sleep(3)  # the load is flowing before the upgrade starts
        sampler.start()
        change = {
            "serve_extra_args": ["--max-log-len", str(100 + int(time.time()) % 900)],  # new on every run
            "bench_canary_scenarios": CANARY_LOAD,
            "upgrade_rules": CANARY_RULES,
            "a800_reports_dir": CANARY_REPORTS,
        }
        run = playbook("-e", json.dumps(change), playbook="playbooks/upgrade.yml")
        time.sleep(3)
    sampling.set()
    sampler.join()
    took = time.monotonic() - began
    text = said(run)
    report = (Path(CANARY_REPORTS) / "upgrade.md").read_text()
    per_host = re.findall(
        r"(a800-mol-serve-\d): out of the router on \S+ with (\d+) request\(s\) in flight; (.+?) after ([\d.]+) s", text
    )
    back = dict(re.findall(r"(a800-mol-serve-\d): back in the router on \S+ after ([\d.]+) s out", text))
    print(f"\ncanary upgrade under load: {load.sent} requests sent ({load.streams_sent} streamed), "
          f"{len(load.failed)} failed, {load.truncated} stream(s) cut short, "
          f"at most {max(out_of_router, default=0)} host(s) out of the router, {took:.0f} s in all")  # fmt: skip
    for h, in_flight, outcome, drained_s in per_host:
        print(f"  {h}: {in_flight} request(s) in flight as it left, {outcome} after {drained_s} s; "
              f"{back.get(h, '?')} s out of the router (drain, restart, verify)")  # fmt: skip
    print(report)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert report.startswith("# Canary upgrade: promote"), report
    assert f"Release {config_hash(H1)} on the canary {H1}, against the old release on\n{H2}" in report, report
    assert "the release runs the image the servers run now: no old image to keep" in report, report
    assert load.failed == [] and load.truncated == 0, load.failed[:5]
    assert load.sent > 20 and load.streams_sent > 10
    assert max(out_of_router) == 1  # each host left, never both
    assert router_workers() == WORKERS
    assert [h for h, *_ in per_host] == [H1, H2] and sorted(back) == [H1, H2]
    assert all(outcome == "all finished" for _, _, outcome, _ in per_host), per_host
    for h in (H1, H2):
        assert config_hash(h) != hashes[h]
    assert run.stdout.count("TASK [verify : Judge everything]") == 2  # each host verified before it rejoined
    ready_h1 = [
        line.split()[0]
        for line in subprocess.run(
            ["docker", "exec", H1, "docker", "logs", "-t", "glm52-nvfp4"], capture_output=True, text=True
        ).stdout.splitlines()
        if "Application startup complete." in line
    ][-1]
    assert ts(started(H2)) > ts(ready_h1)  # host 2 went down only after host 1 served again


def test_a_canary_slower_to_its_first_token_is_taken_out_again_and_rolled_back_under_load(host):
    """A release three times slower to its first token (the double's VLLM_TEST_DOUBLE_TTFT_FACTOR), under the same
    steady load and the default limits: the canary is verified and taken back into the fleet, measured beside host 2
    and judged; the verdict takes it out of the router again, restores its launch and gives it back. Host 2 never
    changes, the release is recorded as rolled back on both servers, and no request fails."""
    only_once(host)
    before = {h: (config_hash(h), started(h)) for h in (H1, H2)}
    with Load() as load:
        time.sleep(3)
        slow = {**SIM_VARS["serve_extra_env"], "VLLM_TEST_DOUBLE_TTFT_FACTOR": "3"}
        change = {"serve_extra_env": slow, "bench_canary_scenarios": CANARY_LOAD, "a800_reports_dir": CANARY_REPORTS}
        run = playbook("-e", json.dumps(change), playbook="playbooks/upgrade.yml")
        time.sleep(3)
    text = said(run)
    report = (Path(CANARY_REPORTS) / "upgrade.md").read_text()
    print(f"\nslow canary under load: {load.sent} requests sent ({load.streams_sent} streamed), {len(load.failed)} "
          f"failed, {load.truncated} stream(s) cut short\n{report}")  # fmt: skip
    assert run.returncode != 0, run.stdout[-4000:]
    assert report.startswith("# Canary upgrade: roll back"), report
    assert re.search(r"mean TTFT \(ms\) [\d.]+x the old release's, above the limit 1\.3x", report), report
    # admitted once verified, taken out again for the rollback, given back: two drains and two rejoins of host 1
    assert re.findall(r"(a800-mol-serve-\d): out of the router", text) == [H1, H1], text[-4000:]
    assert re.findall(r"(a800-mol-serve-\d): back in the router", text) == [H1, H1], text[-4000:]
    assert config_hash(H1) == before[H1][0] and (config_hash(H2), started(H2)) == before[H2]  # host 2 untouched
    assert router_workers() == WORKERS
    for h in (H1, H2):
        rejected = json.loads(subprocess.run(["docker", "exec", h, "cat", f"{STATE}/rejected.json"],
                                             capture_output=True, text=True, check=True).stdout)  # fmt: skip
        assert any(r["canary"] == H1 for r in rejected.values()), (h, rejected)
    assert load.failed == [] and load.truncated == 0, load.failed[:5]


def running_on(name: str) -> int:
    """The requests the host's engine is running now (vLLM's vllm:num_requests_running)."""
    code, text = http(name, "/metrics")
    lines = [line for line in text.splitlines() if line.startswith("vllm:num_requests_running")]
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in lines)) if code == 200 else 0


def test_a_killed_engine_fails_only_the_requests_it_was_running_and_new_ones_succeed(host):
    """kill -9 of host 2's engine under the steady load: at most the requests it was running fail (a stream it had
    started answering cannot be finished elsewhere; one whose answer had not started, vllm-router sends to the other
    host again), every request sent after the kill is answered (the router retries a worker that refuses the
    connection on another), and the engine comes back by its restart policy, back in the router."""
    only_once(host)
    while time.time() - ts(started(H2)) < 15:  # Docker restarts only a container that ran 10 s (docs.docker.com)
        time.sleep(1)
    with Load() as load:
        time.sleep(3)  # the load is flowing
        deadline = time.monotonic() + 60
        while (running := running_on(H2)) == 0:  # kill it with requests in flight
            assert time.monotonic() < deadline, f"no request running on {H2} under the load within 60 s"
            time.sleep(0.2)
        killed, killed_at = time.monotonic(), time.time()
        # the engine's process, killed on the host as the kernel's OOM killer would: `docker kill` would count as
        # an operator's stop, which no restart policy undoes
        pid = subprocess.run(["docker", "exec", H2, "docker", "inspect", "-f", "{{.State.Pid}}", "glm52-nvfp4"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        subprocess.run(["docker", "exec", H2, "kill", "-9", pid], check=True, capture_output=True)
        time.sleep(20)  # new requests while the engine is gone, then while it starts again
    after = [t for t in load.ok_began if t > killed]
    print(f"\nkill -9 under load: {running} request(s) running on {H2} at the kill, {len(load.failed)} failed "
          f"({load.truncated} of them streams cut short) "
          f"({[round(t - killed, 1) for t in load.failed_began]} s from the kill), {len(after)} sent after it "
          f"answered, {load.sent} in all")  # fmt: skip
    # only requests in flight at the kill failed: each was sent before it, and a caller has one request at a time
    assert all(t < killed for t in load.failed_began), load.failed
    assert len(load.failed) <= load.streams, load.failed
    assert len(after) >= 4, load.sent  # requests kept coming after the kill, and were answered
    deadline = time.monotonic() + 300  # the next tests start from two serving hosts: fail here, not there
    while http(H2, "/health")[0] != 200 or router_workers() != WORKERS:
        assert time.monotonic() < deadline, f"{H2} did not serve again in the router within 300 s after the kill"
        time.sleep(2)
    assert ts(started(H2)) > killed_at  # the engine died and its restart policy started it again


def test_the_fleet_play_gives_back_a_host_that_serves_and_names_one_that_does_not(host):
    only_once(host)
    gw("curl", "-s", "-X", "POST", f"http://127.0.0.1:30000/remove_worker?url=http://{H2}:8001")
    run = playbook(playbook="playbooks/fleet.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    assert router_workers() == WORKERS
    subprocess.run(["docker", "exec", H2, "docker", "stop", "glm52-nvfp4"], check=True, capture_output=True)
    try:
        run = playbook(playbook="playbooks/fleet.yml")
        assert run.returncode != 0
        assert f"{H2} at http://{H2}:8001" in said(run)
    finally:
        subprocess.run(["docker", "exec", H2, "docker", "start", "glm52-nvfp4"], check=True, capture_output=True)
        deadline = time.monotonic() + 300  # the next tests start from two serving hosts: fail here, not there
        while http(H2, "/health")[0] != 200:
            if time.monotonic() > deadline:
                logs = subprocess.run(["docker", "exec", H2, "docker", "logs", "--tail", "30", "glm52-nvfp4"],
                                      capture_output=True, text=True)  # fmt: skip
                raise AssertionError(
                    f"{H2} did not serve again within 300 s: {logs.stdout[-2000:]}{logs.stderr[-2000:]}"
                )
            time.sleep(1)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"fleet_gateway_keys": [{"id": "a", "key": KEYS["team-load"]}, {"id": "b", "key": KEYS["team-load"]}]},
         "fleet_gateway_keys[1] (id b): key is the same as entry 0 (a)'s"),
        ({"fleet_gateway_default_limits": {"requests_per_minute": "lots", "burst": 1, "concurrency": 1}},
         "fleet_gateway_default_limits.requests_per_minute is 'lots', not a whole number"),
    ],
)  # fmt: skip
def test_bad_fleet_settings_are_refused_before_anything_is_reloaded(host, change, says):
    """Two of the rules through the play (tests/unit/test_fleet.py holds every rule): nothing is written or reloaded."""
    only_once(host)
    conf = gw("sha256sum", "/etc/nginx/conf.d/a800-fleet.conf")
    pids = gw("systemctl", "show", "-p", "MainPID", "a800-vllm-router.service", "nginx.service")
    run = playbook("-e", json.dumps(change), playbook="playbooks/fleet.yml")
    assert run.returncode != 0
    assert "The fleet gateway cannot be set up as given; nothing was changed" in said(run) and says in said(run)
    for key in (*KEYS.values(), SERVE_KEY):
        assert key not in run.stdout + run.stderr
    assert gw("sha256sum", "/etc/nginx/conf.d/a800-fleet.conf") == conf
    assert gw("systemctl", "show", "-p", "MainPID", "a800-vllm-router.service", "nginx.service") == pids
